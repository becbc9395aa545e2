"""The per-field merge policy of a layout (``"merge"``): which value a MERGE import keeps.

Each target field has a rule (after Eloqua's per-field ``updateRule``); a rule decides in two
steps, so that the result of an import never depends on how its rows are cut into batches:

1. *The file's value* of a field for a key: among the key's valid rows in file order, the first
   non-empty value (``first_non_empty``) or the last one (every other rule). An empty value
   never counts.
2. *Against the contact as it was before the import* (the pre-import state):

   ======================  ==================================================================
   ``last_non_empty``      the file's value replaces the stored one (today's MERGE, default)
   ``first_non_empty``     the same, with the file's first value
   ``fill_empty``          the file's value lands only where the stored one is empty/absent
   ``keep_existing``       a contact that existed keeps every value, even an empty one; the
                           file's value fills only the contacts the import creates
   ======================  ==================================================================

   Channels: ``union`` (default) adds the file's values to the stored ones; ``replace`` makes
   the file's values of a channel the contact's values of that channel (the stored ones the
   file lacks are soft-deleted); a channel the file has no value for is left as it is.

A contact the import created counts as absent before it. A batch reads the stored contacts as
the import's earlier batches left them, so it needs to know what of that state is the import's
own doing: whether the contact was created by the import (``contact.import_job_id``) and which
of its fields the import already gave a value to (a *mark*, ``import_merge_mark``).
:func:`decide` is that decision; the reference model (``core.reference``) states the same
rules row by row. DISCARD ignores the policy.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from importer.core.errors import LayoutError


class Rule(enum.StrEnum):
    """How a field's value is chosen (its value is the layout's word)."""

    LAST_NON_EMPTY = "last_non_empty"
    FIRST_NON_EMPTY = "first_non_empty"
    KEEP_EXISTING = "keep_existing"
    FILL_EMPTY = "fill_empty"


class ChannelRule(enum.StrEnum):
    """How the file's values of a channel meet a stored contact's."""

    UNION = "union"
    REPLACE = "replace"


# Mark names (``import_merge_mark.target``): the field a batch of the import gave a value.
NAME = "name"
STREET_ADDRESS = "street_address"


def custom_target(lower: str) -> str:
    """The mark of a custom field (by its lower-case name)."""
    return f"custom:{lower}"


def channel_target(channel: int) -> str:
    """The mark of a channel the import replaced on a stored contact."""
    return f"channel:{channel}"


@dataclass(frozen=True, slots=True)
class MergePolicy:
    """The rule of each target field; ``custom`` by lower-case field name, ``custom_default``
    (``custom:*``) for the custom fields not named."""

    name: Rule = Rule.LAST_NON_EMPTY
    street_address: Rule = Rule.LAST_NON_EMPTY
    custom: Mapping[str, Rule] = field(default_factory=dict)
    custom_default: Rule = Rule.LAST_NON_EMPTY
    channels: ChannelRule = ChannelRule.UNION

    @property
    def is_default(self) -> bool:
        """Today's MERGE everywhere: the batch takes its fast path (no provenance read)."""
        last = Rule.LAST_NON_EMPTY
        return (
            self.name is last
            and self.street_address is last
            and self.custom_default is last
            and self.channels is ChannelRule.UNION
            and all(rule is last for rule in self.custom.values())
        )

    @property
    def takes_first(self) -> bool:
        """Whether some field keeps the file's first value (the fold must know the rules)."""
        first = Rule.FIRST_NON_EMPTY
        return (
            first in (self.name, self.street_address, self.custom_default)
            or first in self.custom.values()
        )

    def custom_rule(self, lower: str) -> Rule:
        """The rule of a custom field, by its lower-case name."""
        return self.custom.get(lower, self.custom_default)


DEFAULT_POLICY = MergePolicy()


def decide(rule: Rule, stored_empty: bool, own: bool, marked: bool) -> tuple[bool, bool]:
    """Whether a batch's value of a field lands on a stored contact, and whether the batch marks
    the field as given its value by this import.

    ``own``: the import created the contact (every value it has is the import's); ``marked``:
    an earlier batch of the import gave the field its value. Otherwise the stored value is the
    pre-import one. A batch's value is the first (``first_non_empty``) or last non-empty value
    of its rows; with the marks, batch after batch ends where the whole file at once would.
    """
    ours = own or marked
    if rule is Rule.LAST_NON_EMPTY:
        return True, False
    if rule is Rule.FIRST_NON_EMPTY:  # ours: an earlier batch had the first value, if any
        return (stored_empty, False) if ours else (True, True)
    if rule is Rule.FILL_EMPTY:  # ours: the pre-import value was empty, the file's last wins
        return (True, False) if ours else (stored_empty, stored_empty)
    return own, False  # KEEP_EXISTING: only a contact the import created takes values


def policy_of(layout: Mapping[str, object] | None) -> MergePolicy:
    """The merge policy of a job's stored layout document (the default without one)."""
    return DEFAULT_POLICY if layout is None else parse_policy(layout.get("merge"))


# --- the layout's "merge" object ------------------------------------------------------------

_SCALARS = (NAME, STREET_ADDRESS)
_CHANNELS = "channels"
_WORDS = (*_SCALARS, "custom:<field>", "custom:*", _CHANNELS)


def parse_policy(document: object) -> MergePolicy:
    """The layout's ``merge`` object → a policy; raise :class:`LayoutError` at the entry at
    fault (unknown field, unknown rule, a rule the field does not take)."""
    if document is None:
        return DEFAULT_POLICY
    if not isinstance(document, Mapping):
        raise LayoutError("layout.merge must be an object {field: rule}", "layout.merge")
    rules: dict[str, Rule] = {}
    custom: dict[str, Rule] = {}
    channels = ChannelRule.UNION
    seen: set[str] = set()
    for key, word in document.items():
        where = f"layout.merge.{key}"
        if not isinstance(key, str) or not isinstance(word, str):
            raise LayoutError('a layout.merge entry must be "field": "rule"', where)
        text = key.strip()
        lower = text.lower()
        if lower == _CHANNELS:
            _refuse_twice(seen, lower, where)
            channels = _choice(ChannelRule, word, where, "channels")
        elif lower in _SCALARS:
            _refuse_twice(seen, lower, where)
            rules[lower] = _choice(Rule, word, where, lower)
        elif lower.startswith("custom:") and text[7:].strip():
            name = text[7:].strip().lower()
            _refuse_twice(seen, f"custom:{name}", where)
            custom[name] = _choice(Rule, word, where, f"custom:{text[7:].strip()}")
        else:
            raise LayoutError(f"unknown layout.merge field {key!r}{_hint(text, _WORDS)}", where)
    default = custom.pop("*", Rule.LAST_NON_EMPTY)
    return MergePolicy(
        rules.get(NAME, Rule.LAST_NON_EMPTY),
        rules.get(STREET_ADDRESS, Rule.LAST_NON_EMPTY),
        custom,
        default,
        channels,
    )


_E = TypeVar("_E", Rule, ChannelRule)


def _choice(kind: type[_E], word: str, where: str, what: str) -> _E:
    """The rule named ``word``; for a field's rule, a channel word is refused by name."""
    try:
        return kind(word.strip().lower())
    except ValueError:
        known = [member.value for member in kind]
        other = ChannelRule if kind is Rule else Rule
        if word.strip().lower() in {member.value for member in other}:
            message = f"{word!r} is not a rule for {what}; it takes one of {', '.join(known)}"
            raise LayoutError(message, where) from None
        raise LayoutError(f"unknown merge rule {word!r}{_hint(word, known)}", where) from None


def _refuse_twice(seen: set[str], lower: str, where: str) -> None:
    """``custom:Plano`` and ``custom:plano`` name one field (names match case-insensitively):
    two rules for it would leave the choice to the JSON object's order."""
    if lower in seen:
        raise LayoutError(f"layout.merge gives {lower!r} two rules", where)
    seen.add(lower)


def _hint(text: str, known: list[str] | tuple[str, ...]) -> str:
    near = difflib.get_close_matches(text.strip().lower(), known, n=1)
    return f" (did you mean {near[0]!r}?)" if near else f"; known: {', '.join(known)}"
