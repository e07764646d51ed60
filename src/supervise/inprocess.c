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

enum hp_stage hp_agent_stage(const struct hp_agent *agent)
{
        return agent->stage;
}

bool hp_agent_workers_stopping(const struct hp_agent *agent)
{
        return agent->group_active && agent->group.stopping;
}

struct hp_ipc_server *hp_agent_ipc(struct hp_agent *agent)
{
        return &agent->ipc;
}
