import pytest
from hypothesis import given
from hypothesis import strategies as st

from slabench.core.sse import EventTooLong, SSEParser

STREAM = (
    b": keep-alive\r\n\r\n"
    b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"Hel"}}]}\r\n\r\n'
    b"event: note\ndata: line one\ndata: line two\n\n"
    b"data:no-space\r\r"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    '{"choices":[{"delta":{"role":"assistant","content":""}}]}',
    '{"choices":[{"delta":{"content":"Hel"}}]}',
    "line one\nline two",
    "no-space",
    "[DONE]",
]


def parse_in_pieces(data: bytes, cuts: list[int]) -> list:
    p, out, prev = SSEParser(), [], 0
    for i, cut in enumerate([*sorted(cuts), len(data)]):
        out += p.feed(data[prev:cut], float(i))
        prev = cut
    return out


def test_whole_stream():
    events = SSEParser().feed(STREAM, 1.0)
    assert [e.data for e in events] == EXPECTED
    assert events[2].event == "note"
    assert all(e.time == 1.0 for e in events)


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=40))
def test_splitting_the_byte_stream_anywhere_never_changes_the_events(cuts):
    assert [(e.data, e.event) for e in parse_in_pieces(STREAM, cuts)] == [
        (e, "note" if i == 2 else None) for i, e in enumerate(EXPECTED)
    ]


PIECES = [
    b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n',
    b"data: \xff\xfe not utf-8\n\n",
    b"data:  two spaces\n\n",
    b"event: error\n",
    b"data: one\ndata: two\n\n",
    b": ping\n\n",
    b"data: crlf\r\n\r\n",
    b"data: cr\r",
    b"data: partial",
    b"\n\n",
    b"\n",
    b"data: " + b"x" * 120 + b"\n\n",  # over the limit below
]


@given(st.lists(st.sampled_from(PIECES), max_size=20))
def test_whole_events_read_at_once_parse_as_the_same_bytes_read_one_at_a_time(pieces):
    """A read that is exactly one `data:` event takes a shortcut; it must give what the general path gives."""

    def parse(feeds) -> list | str:
        p = SSEParser(max_event_bytes=100)
        try:
            return [(e.data, e.event) for f in feeds for e in p.feed(f, 0.0)]
        except EventTooLong:
            return "too long"

    stream = b"".join(pieces)
    assert parse(pieces) == parse([stream[i : i + 1] for i in range(len(stream))])


def test_event_is_stamped_by_the_feed_that_completes_it():
    p = SSEParser()
    assert p.feed(b'data: {"a"', 1.0) == []
    assert p.feed(b":1}\n", 2.0) == []
    assert p.pending
    (ev,) = p.feed(b"\n", 3.0)
    assert ev.time == 3.0 and ev.data == '{"a":1}'
    assert not p.pending


def test_comments_are_counted_not_dispatched():
    p = SSEParser()
    assert p.feed(b": ping\n\n: ping\n\n", 0.0) == []
    assert p.comments == 2


def test_crlf_split_across_feeds_is_one_line_end():
    p = SSEParser()
    out = p.feed(b"data: a\r", 0.0) + p.feed(b"\n\r", 1.0) + p.feed(b"\n", 2.0)
    assert [(e.data, e.time) for e in out] == [("a", 1.0)]


def test_a_line_up_to_the_limit_is_fine_one_byte_more_is_not():
    line = b"data: " + b"x" * 94  # 100 bytes
    (ev,) = SSEParser(max_event_bytes=100).feed(line + b"\n\n", 0.0)
    assert len(ev.data) == 94
    with pytest.raises(EventTooLong, match="longer than 100 bytes"):
        SSEParser(max_event_bytes=100).feed(line + b"y\n\n", 0.0)


@given(st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=30))
def test_a_long_line_is_caught_however_it_is_split(sizes):
    """No newline in sight: the parser keeps the pieces (never one ever-growing copy) and stops at the limit."""
    p = SSEParser(max_event_bytes=200)
    fed = 0
    with pytest.raises(EventTooLong):
        for n in [*sizes, 201]:
            p.feed(b"z" * n, 0.0)
            fed += n
    assert fed <= 200


def test_an_event_of_many_short_data_lines_is_bounded_too():
    p = SSEParser(max_event_bytes=1000)
    with pytest.raises(EventTooLong, match="event with more than 1,000 bytes"):
        for _ in range(200):
            p.feed(b"data: " + b"y" * 10 + b"\n", 0.0)


def test_cr_only_lines_dispatch_as_they_arrive():
    p = SSEParser()
    assert [e.data for e in p.feed(b"data: a\r\r", 1.0)] == ["a"]
    assert [e.data for e in p.feed(b"data: b\r", 2.0) + p.feed(b"\r", 3.0)] == ["b"]


BOM = b"\xef\xbb\xbf"


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM) + 3), max_size=40))
def test_a_bom_at_the_stream_start_is_dropped_however_the_bytes_are_split(cuts):
    """SSE drops a UTF-8 BOM at the stream's start: the first event is not lost, even a byte at a time."""
    assert [e.data for e in parse_in_pieces(BOM + STREAM, cuts)] == EXPECTED


def test_a_bom_elsewhere_makes_a_line_with_no_field_name_counted_as_skipped():
    p = SSEParser()
    events = p.feed(b'data: {"a": 1}\n\n' + BOM + b'data: {"b": 2}\n\nData: {"c": 3}\n\nid: 7\nretry: 5\n\n', 1.0)
    assert [e.data for e in events] == ['{"a": 1}']
    assert p.skipped == 2 and p.first_skipped == BOM + b'data: {"b": 2}'


def test_a_stream_cut_inside_a_bom_is_pending():
    p = SSEParser()
    assert p.feed(BOM[:2], 1.0) == [] and p.pending
