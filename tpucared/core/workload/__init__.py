"""Workload decisions: launch, watch, stop and relaunch the job on every worker of a slot.

Called by `core/planning/tick.py` for every slot, after the node planner.

- `inputs`    what the workload planner reads: fresh probes of the workers, stored attempts.
- `slot_work` what the rules see of one slot at one tick (`SlotWork`), and their tunables
              (`WorkloadPolicy`, the crash backoff).
- `planner`   one slot's attempt + this tick's probe -> next steps (launch, cleanup, relaunch,
              give up, replace the node).
- `judge`     the running attempt + this tick's probe -> its verdict (ends how, resumes, or
              runs on), for the planner.
- `gang`      a multislice slot's slices as one stand-in node for the planner and judge; the
              workers numbered slice by slice; when the runtime may probe and launch (`whole`).
- `actions`   the workload actions and the contract the workload runner honours for each.
- `attempts`  the attempt lifecycle: states derived from the stored attempt, the table of
              allowed edges the store checks on every attempt write.
- `probes`    probe scheduling for the runtime's background jobs: which slots to probe when,
              which probe answers reach the planner, which chains of actions to keep or drop.
- `job_failures` a slot's background job that failed unexpectedly: its backoff (the core
              `Backoff` rule), when the slot may run a job again, the event's words.
- `launch_gate` what a launch needs that only the daemon can check (every secret's variable
              in its environment, a clean slate after the previous attempt): the planner's
              hold or reason, the executor's refusal.
- `notices`   a preemption notice heard on one slice: which other slices' runs get the stop
              signal, until when the runtime waits for the workload to stop.
"""
