"""PyPTO's MPMD runtime: a kernel built with PyPTO runs as subgraph tasks that a scheduler on the AI CPU
hands out one at a time, not as one program on every core.

PyPTO compiles a kernel's loops into subgraphs, each the smallest unit it executes; each subgraph becomes a
task. A scheduling AI CPU thread sends every task whose inputs are ready to an idle AI core, and when a task
ends it takes the core's callback, releases the task's successors and sends the next (cann-recipes-infer
``docs/integration/ling-3.0-flash/bailing_v3_pypto_operator_guide.md``, "MPMD 运行时", and
``docs/models/deepseek_v3_2_exp/deepseek_v3.2_exp_pypto_operator_guide.md`` @fbc225d2). So a kernel of many
small tasks waits on its scheduler, not on its bytes or flops: the Ling guide's KDA decode kernel found its
Vector cores waiting on scheduling, not on their predecessors.

- **Tasks.** The kernel's catalog entry names how many tasks it runs (``mpmd_tasks``); whoever builds the
  kernel derives it from the loops and tile shapes the kernel's source states. Each task runs on one core,
  so the kernel occupies ``min(tasks, cores)`` cores.
- **A task's own time.** The kernel's work, as its own cost rule prices it on the cores it occupies, split
  evenly over its tasks; the cores run them in waves.
- **The scheduler.** Hands out one task every ``[overhead_us] mpmd_task`` microseconds (the whole of its
  per-task work: dequeue, send, callback, successors), an ``estimate``: no public source measures it.
- **Overlap.** The two run side by side: the kernel lasts the longer of the scheduler's hand-outs followed
  by the last task's run, and the cores' waves after the first hand-out.
"""

from __future__ import annotations

import math


def occupied_cores(tasks: int, cap: int) -> int:
    """The cores an MPMD kernel of ``tasks`` tasks runs on: one task a core, at most ``cap``."""
    return max(1, min(tasks, cap))


def scheduled_us(work_us: float, tasks: int, cores: int, per_task_us: float) -> float:
    """The kernel's body when its scheduler hands out ``tasks`` tasks, ``per_task_us`` apart, to ``cores``
    cores that run ``work_us`` of work between them (``work_us`` is that work's time on ``cores`` cores).

    With no scheduling cost this is the work in whole waves; with a costly scheduler it is the tasks
    handed out one after another plus the last one's run.
    """
    task_us = work_us * cores / tasks
    waves = math.ceil(tasks / cores)
    return max(tasks * per_task_us + task_us, waves * task_us + per_task_us)
