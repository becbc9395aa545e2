"""A regex over digit strings → the equivalent DFA, for the compiled phone fast path.

``importer.core._rows`` matches the pure module's whole-number phone regexes
(``normalize._BR.plain_valid`` and ``plus_valid``) on strings of ASCII digits; a table walk
does that in a few nanoseconds where ``re`` takes most of a microsecond. The table comes from
the pattern itself (parsed by the standard library's ``re._parser``) by Brzozowski derivatives,
so it follows the phonenumbers metadata the pure module was built from. Lookaheads are
intersections (``(?!X)``: a complement), exact where nothing follows the group that holds them,
which is how ``normalize`` writes them. A construct outside that subset (backreferences,
lookbehinds, possessive or atomic groups, anchors elsewhere, flags) raises
:class:`UnsupportedPatternError`; the compiled code then calls the regex.

Pure: no I/O, the standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

__all__ = ["DigitDFA", "UnsupportedPatternError", "compile_digits"]

DIGITS = frozenset(range(ord("0"), ord("9") + 1))
MAX_STATES = 4096  # the tables stay small; a pattern needing more goes to the regex

# A language over digit strings, as a hashable tree: ("none",), ("eps",), ("set", digits),
# ("cat", a, b) (right-nested), ("alt", {a, ...}), ("and", {a, ...}), ("not", a), ("star", a).
Node = tuple[Any, ...]
NONE: Node = ("none",)
EPS: Node = ("eps",)
ANY: Node = ("star", ("set", DIGITS))


class UnsupportedPatternError(ValueError):
    """The pattern uses a construct this converter does not translate."""


@dataclass(frozen=True, slots=True)
class DigitDFA:
    """``transitions[state * 10 + digit]``: the next state; state 0 is the start, ``dead``
    accepts nothing whatever follows; ``accepting[state]``: the digits read so far match."""

    transitions: tuple[int, ...]
    accepting: tuple[bool, ...]
    dead: int

    def fullmatch(self, digits: bytes) -> bool:
        state = 0
        for code in digits:
            if code not in DIGITS:
                return False
            state = self.transitions[state * 10 + code - 48]
        return self.accepting[state]


# ---------------------------------------------------------------------------
# Smart constructors: keep the trees canonical so that derivatives repeat
# ---------------------------------------------------------------------------


def _cat(a: Node, b: Node) -> Node:
    if NONE in (a, b):
        return NONE
    if a == EPS:
        return b
    if b == EPS:
        return a
    if a[0] == "cat":
        return _cat(a[1], _cat(a[2], b))
    return ("cat", a, b)


def _alt(*nodes: Node) -> Node:
    items: set[Node] = set()
    for node in nodes:
        if node[0] == "alt":
            items.update(node[1])
        elif node != NONE:
            items.add(node)
    if not items:
        return NONE
    return next(iter(items)) if len(items) == 1 else ("alt", frozenset(items))


def _and(*nodes: Node) -> Node:
    items: set[Node] = set()
    for node in nodes:
        if node == NONE:
            return NONE
        if node[0] == "and":
            items.update(node[1])
        elif node != ANY:
            items.add(node)
    if not items:
        return ANY
    return next(iter(items)) if len(items) == 1 else ("and", frozenset(items))


def _not(a: Node) -> Node:
    return a[1] if a[0] == "not" else ("not", a)


def _nullable(node: Node) -> bool:
    kind = node[0]
    if kind in ("eps", "star"):
        return True
    if kind in ("none", "set"):
        return False
    if kind == "cat":
        return _nullable(node[1]) and _nullable(node[2])
    if kind == "alt":
        return any(_nullable(n) for n in node[1])
    if kind == "and":
        return all(_nullable(n) for n in node[1])
    return not _nullable(node[1])  # not


def _derivative(node: Node, code: int) -> Node:  # noqa: PLR0911 - one per node kind
    """The language of the strings s such that ``chr(code) + s`` is in ``node``'s."""
    kind = node[0]
    if kind in ("none", "eps"):
        return NONE
    if kind == "set":
        return EPS if code in node[1] else NONE
    if kind == "cat":
        first = _cat(_derivative(node[1], code), node[2])
        return _alt(first, _derivative(node[2], code)) if _nullable(node[1]) else first
    if kind == "alt":
        return _alt(*(_derivative(n, code) for n in node[1]))
    if kind == "and":
        return _and(*(_derivative(n, code) for n in node[1]))
    if kind == "star":
        return _cat(_derivative(node[1], code), node)
    return _not(_derivative(node[1], code))  # not


# ---------------------------------------------------------------------------
# re._parser trees → nodes
# ---------------------------------------------------------------------------


def _charset(items: Sequence[tuple[Any, Any]]) -> Node:
    codes: set[int] = set()
    negate = False
    for op, av in items:
        if op is sre.NEGATE:
            negate = True
        elif op is sre.LITERAL:
            codes.add(av)
        elif op is sre.RANGE:
            codes.update(range(av[0], av[1] + 1))
        elif op is sre.CATEGORY and av is sre.CATEGORY_DIGIT:
            codes.update(DIGITS)
        elif op is sre.CATEGORY and av is sre.CATEGORY_NOT_DIGIT:
            pass  # no digit
        else:
            raise UnsupportedPatternError(f"character class item {op}")
    digits = (DIGITS - codes) if negate else (DIGITS & codes)
    return ("set", frozenset(digits)) if digits else NONE


def _repeat(body: Node, low: int, high: int) -> Node:
    """``body{low,high}``; ``high`` MAXREPEAT: unbounded."""
    if high == sre.MAXREPEAT:
        tail: Node = ("star", body) if body != NONE else EPS
    else:
        tail = EPS
        for _ in range(high - low):
            tail = _alt(EPS, _cat(body, tail))
    head = EPS
    for _ in range(low):
        head = _cat(body, head)
    return _cat(head, tail)


def _lookahead(body: Any) -> Node:
    """The strings a lookahead body accepts from its position to the end of the string."""
    items = list(body)
    if items and items[-1] == (sre.AT, sre.AT_END_STRING):
        return _sequence(items[:-1], tail=True)
    return _cat(_sequence(items, tail=False), ANY)


def _sequence(items: Sequence[tuple[Any, Any]], *, tail: bool) -> Node:
    """A sequence's language; ``tail``: nothing follows it up to the end of the string."""
    node = EPS
    for i, (op, av) in enumerate(items):
        last = tail and i == len(items) - 1
        if op in (sre.ASSERT, sre.ASSERT_NOT):
            direction, body = av
            if direction != 1 or not tail:
                raise UnsupportedPatternError("a lookbehind, or a lookahead that something follows")
            ahead = _lookahead(body)
            rest = _sequence(items[i + 1 :], tail=True)
            return _cat(node, _and(ahead if op is sre.ASSERT else _not(ahead), rest))
        node = _cat(node, _item(op, av, last=last))
    return node


def _item(op: Any, av: Any, *, last: bool) -> Node:  # noqa: PLR0911 - one per node kind
    if op is sre.LITERAL:
        return ("set", frozenset({av})) if av in DIGITS else NONE
    if op is sre.NOT_LITERAL:
        return ("set", DIGITS - {av})
    if op is sre.ANY:
        return ("set", DIGITS)
    if op is sre.IN:
        return _charset(av)
    if op is sre.SUBPATTERN:
        _group, add_flags, del_flags, body = av
        if add_flags or del_flags:
            raise UnsupportedPatternError("inline flags")
        return _sequence(list(body), tail=last)
    if op is sre.BRANCH:
        return _alt(*(_sequence(list(b), tail=last) for b in av[1]))
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):  # greedy or lazy: the same language
        low, high, body = av
        return _repeat(_sequence(list(body), tail=False), low, high)
    if op is sre.AT and av is sre.AT_END_STRING and last:
        return EPS
    raise UnsupportedPatternError(f"{op} {av!r}")


def compile_digits(pattern: re.Pattern[bytes]) -> DigitDFA:
    """The DFA of the digit strings ``pattern.fullmatch`` accepts (other bytes: none)."""
    if not isinstance(pattern.pattern, bytes) or pattern.flags & ~re.DEBUG != 0:
        raise UnsupportedPatternError("a bytes pattern without flags only")
    start = _sequence(list(sre_parse.parse(pattern.pattern)), tail=True)
    states: dict[Node, int] = {start: 0}
    order = [start]
    transitions: list[int] = []
    for node in order:  # grows while it is walked: breadth first
        for digit in range(10):
            following = _derivative(node, 48 + digit)
            if following not in states:
                if len(order) >= MAX_STATES:
                    raise UnsupportedPatternError("too many states")
                states[following] = len(order)
                order.append(following)
            transitions.append(states[following])
    if NONE not in states:
        states[NONE] = len(order)
        order.append(NONE)
        transitions.extend([states[NONE]] * 10)
    return DigitDFA(tuple(transitions), tuple(_nullable(n) for n in order), states[NONE])
