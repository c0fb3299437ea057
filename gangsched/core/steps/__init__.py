"""Gang policy as named steps. One gang cycle (``Scheduler.schedule_one``) takes the gang at
the head of the queue and runs these steps in order over its ``Turn`` (turn.py) until one of
them ends the cycle:

1. ``Intake`` (gates.py): refused members told; a gang with nothing pending is done;
2. ``Quarantine`` (quarantine.py): a gang gangsched itself failed on waits out its hold;
3. ``GroupGate`` (gates.py): a gang group waits for every sibling and for room for them all;
4. ``VolumeGate`` (gates.py): a member whose volumes keep it from scheduling holds all back;
5. ``FailureReplay`` (replay.py): a pod whose class failed on the same cache fails alike;
6. ``Placement`` (place.py): the whole gang placed in one attempt (core/cycle.py);
7. ``Preemption`` (preempt.py): a gang that failed for want of capacity evicts lower ones;
8. ``Reservations`` (reserve.py): one that waited too long gets capacity set aside;
9. ``FailureReport`` (replay.py): a failed attempt told, backed off and remembered;
10. ``Permit`` (permit.py): bind the gang whole, or hold what it placed until a deadline.

Each step owns its state (what a preemption waits for, the reservation, the failure memo) and
returns its decisions in the turn; the gangs, their specs and the queue are the ``GangBook``
(book.py) they share. A new gang policy is a new step module and one line in the scheduler's
list, as a Volcano action is a folder and a line in its configuration.
"""
