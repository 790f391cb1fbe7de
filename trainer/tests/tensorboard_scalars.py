"""Prints every scalar TensorBoard's own reader finds in an event directory,
one `tag step value` line each, sorted by tag then step.

Used by trainer/tests/events_tensorboard.rs; needs the pinned tensorboard
(trainer/tests/tensorboard-requirements.txt).
"""
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

acc = EventAccumulator(sys.argv[1])
acc.Reload()
for tag in sorted(acc.Tags()["scalars"]):
    for event in acc.Scalars(tag):
        print(tag, event.step, repr(event.value))
