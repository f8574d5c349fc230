"""SplitQueue: the split reader's bookkeeping (both built-in connectors read through it)."""

from __future__ import annotations

from dataclasses import dataclass

from splitsource import Split, SplitQueue


@dataclass(frozen=True)
class Range(Split):
    start: int
    end: int

    @property
    def split_id(self) -> str:
        return f"range-{self.start}"


def test_the_position_starts_at_the_first_split_and_moves_to_the_next_on_pop() -> None:
    queue: SplitQueue[Range, int] = SplitQueue(lambda split: split.start)
    assert queue.head is None and queue.position is None and not queue
    queue.add([Range(10, 20), Range(30, 40)])
    assert queue.head == Range(10, 20) and queue.position == 10 and len(queue) == 2
    queue.position = 15  # a fetch read part of the head split
    queue.add([Range(50, 60)])  # adding more does not move the position in the head split
    assert queue.position == 15
    assert queue.pop() == Range(10, 20)
    assert queue.head == Range(30, 40) and queue.position == 30
    queue.pop()
    queue.pop()
    assert queue.head is None and queue.position is None and not queue


def test_a_resumed_split_starts_where_its_state_says() -> None:
    # a split handed back after an interruption is the remainder (SplitState.to_split()): its start is the resume
    queue: SplitQueue[Range, int] = SplitQueue(lambda split: split.start)
    queue.add([Range(17, 20)])
    assert queue.position == 17
