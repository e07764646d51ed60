# SPDX-License-Identifier: Apache-2.0
"""torchrun from Debian's python3-torch (1.13), made to run on Python 3.11.

torch 1.13's Std.from_str maps "3" to a member by iterating the IntFlag
Std, and since Python 3.11 iterating a flag yields only its single-bit
members (OUT, ERR), so --tee 3 and --redirects 3 come out as None and the
launcher crashes. This replaces that one function with a lookup by value,
which is what it meant, and then runs torchrun's own main() unchanged:

    /usr/bin/python3 bench/torchrun_compat.py --standalone --nproc_per_node 8 ...
"""

import re
import sys

from torch.distributed.elastic.multiprocessing import api


def _from_str(cls, vm):
    def to_std(v):
        return cls(int(v))

    if re.match(api._VALUE_REGEX, vm):
        return to_std(vm)
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): to_std(v) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")


api.Std.from_str = classmethod(_from_str)

if __name__ == "__main__":
    from torch.distributed.run import main

    sys.argv[0] = "torchrun"
    main()
