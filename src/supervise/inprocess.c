/* What the in-process-restart driver needs beyond the attempt API: the
 * rules stop watching while the training processes wait at the barrier,
 * and resume, with the waiting time left out, once job_start releases
 * them (§4.4). */
#include "hyperpod/supervise.h"

#include "supervise-private.h"

void hp_agent_suspend_rules(struct hp_agent *agent)
{
        hp_agent__monitors_suspend(agent);
}

void hp_agent_resume_rules(struct hp_agent *agent)
{
        hp_agent__monitors_resume(agent);
}
