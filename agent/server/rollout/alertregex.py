"""A regular expression over alert names, matched in linear time (ours; pure): the alert gate's
(agent/server/rollout/alertgate.py).

Python's ``re`` backtracks: a pattern such as ``(a+)+b`` takes exponential time, holding the GIL
and so every thread of the server. The pattern here comes from a pool annotation, so it is
compiled to a Thompson automaton and run as a set of states (RE2's and Go's way, which kured's
``--alert-filter-regexp`` uses: kubereboot/kured pkg/blockers/prometheus.go:115-121 ``matchesRegex``): a
match costs at most (name length) x (pattern length) steps, whatever the pattern.

The syntax is the common subset of RE2 and Python's ``re``: literal characters, ``.``, ``[...]``
and ``[^...]`` with ranges, ``\\d \\w \\s`` (and ``\\D \\W \\S``), an escaped punctuation character,
``(...)`` and ``(?:...)``, ``|``, ``*``, ``+``, ``?`` (a lazy ``*?``, ``+?``, ``??`` matches the same
names); a ``^`` at the very start and a ``$`` at the very end are allowed and change nothing. The
match is anchored at both ends, as a Prometheus label matcher ``=~`` is: ``Kube.*`` matches
``KubeNodeNotReady``, ``Kube`` alone does not. Counted repetition ``{m,n}``, flags ``(?i)``,
back-references and look-arounds are refused with what to write instead.
"""

from typing import FrozenSet, List, Optional, Tuple

MAX_PATTERN = 256  # characters: a few alert names or prefixes
MAX_DEPTH = 16  # nested groups
_CLASSES = {"d": (False, "", (("0", "9"),)), "w": (False, "_", (("a", "z"), ("A", "Z"), ("0", "9"))),
            "s": (False, " \t\n\r\f\v", ())}

# a character test: (negated, characters, ranges); None matches any character but a newline
Pred = Optional[Tuple[bool, str, Tuple[Tuple[str, str], ...]]]


class PatternInvalid(ValueError):
    """The pattern is not one this module compiles; the message says where and what to write."""


def _accepts(pred: Pred, c: str) -> bool:
    if pred is None:
        return c != "\n"
    negated, chars, ranges = pred
    return (c in chars or any(lo <= c <= hi for lo, hi in ranges)) != negated


class _Builder:
    """A recursive-descent parser that emits the automaton's states as it reads: each state is
    [pred or None, out1, out2, kind] with kind "c" (consume one character), "s" (split) or "m"."""

    def __init__(self, text: str, offset: int):
        self.text, self.pos, self.depth, self.offset = text, 0, 0, offset  # offset: a leading ^ left out
        self.states: List[list] = []

    def fail(self, what: str) -> PatternInvalid:
        return PatternInvalid(f"at character {self.pos + self.offset + 1}: {what}")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def state(self, kind: str, pred: Pred = None) -> int:
        self.states.append([pred, None, None, kind])
        return len(self.states) - 1

    # a fragment: (start state, [(state, slot) left dangling])
    def alt(self) -> Tuple[int, list]:
        first = self.concat()
        while self.peek() == "|":
            self.pos += 1
            second = self.concat()
            split = self.state("s")
            self.states[split][1], self.states[split][2] = first[0], second[0]
            first = (split, first[1] + second[1])
        return first

    def concat(self) -> Tuple[int, list]:
        parts = []
        while self.peek() not in ("", "|", ")"):
            parts.append(self.repeat())
        if not parts:
            empty = self.state("s")  # matches the empty string: one split with both ways the same
            return empty, [(empty, 1), (empty, 2)]
        start, dangling = parts[0]
        for nxt_start, nxt_dangling in parts[1:]:
            self.patch(dangling, nxt_start)
            dangling = nxt_dangling
        return start, dangling

    def patch(self, dangling: list, to: int) -> None:
        for index, slot in dangling:
            self.states[index][slot] = to

    def repeat(self) -> Tuple[int, list]:
        start, dangling = self.atom()
        op = self.peek()
        if op not in ("*", "+", "?"):
            if op == "{":
                raise self.fail("counted repetition {m,n} is not supported: write the item out, or use * + ?")
            return start, dangling
        self.pos += 1
        if self.peek() == "?":
            self.pos += 1  # lazy: the same names match
        if self.peek() in ("*", "+", "?", "{"):
            raise self.fail(f"{self.peek()!r} repeats a repetition: write one of * + ? after an item")
        split = self.state("s")
        self.states[split][1] = start
        if op == "?":
            return split, dangling + [(split, 2)]
        self.patch(dangling, split)
        return (split if op == "*" else start), [(split, 2)]

    def atom(self) -> Tuple[int, list]:
        c = self.peek()
        if c == "(":
            return self.group()
        if c in ("*", "+", "?", "{"):
            raise self.fail(f"{c!r} repeats nothing: escape it (\\{c}) or put an item before it")
        if c in ("^", "$"):
            raise self.fail(f"{c!r} is allowed only at the very start (^) or end ($): the match is anchored anyway")
        if c in ("]", "}"):
            raise self.fail(f"{c!r} closes nothing: escape it (\\{c})")
        self.pos += 1
        if c == ".":
            pred: Pred = None
        elif c == "[":
            pred = self.klass()
        elif c == "\\":
            pred = self.escape()
        else:
            pred = (False, c, ())
        s = self.state("c", pred)
        return s, [(s, 1)]

    def group(self) -> Tuple[int, list]:
        self.pos += 1
        if self.text.startswith("?:", self.pos):
            self.pos += 2
        elif self.peek() == "?":
            raise self.fail("only (...) and (?:...) groups are supported: no flags such as (?i) (write [Kk]ube), "
                            "no look-around, no named groups")
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"groups nest more than {MAX_DEPTH} deep")
        inner = self.alt()
        if self.peek() != ")":
            raise self.fail("a group is not closed: add ')'")
        self.pos += 1
        self.depth -= 1
        return inner

    def escape(self) -> Tuple[bool, str, Tuple[Tuple[str, str], ...]]:
        c = self.peek()
        if not c:
            raise self.fail("the pattern ends with a lone backslash")
        self.pos += 1
        if c in _CLASSES:
            return _CLASSES[c]
        if c.lower() in _CLASSES:
            negated, chars, ranges = _CLASSES[c.lower()]
            return (True, chars, ranges)
        if c.isalnum():
            self.pos -= 2  # at the backslash
            raise self.fail(f"\\{c} is not supported: escape only punctuation, or use \\d \\w \\s")
        return (False, c, ())

    def klass(self) -> Pred:
        negated = self.peek() == "^"
        self.pos += negated
        chars, ranges = "", []
        first = True
        while True:
            c = self.peek()
            if not c:
                raise self.fail("a character class is not closed: add ']'")
            if c == "]" and not first:
                self.pos += 1
                break
            first = False
            self.pos += 1
            if c == "\\":
                negated_sub, members, spans = self.escape()
                if negated_sub:
                    raise self.fail("\\D, \\W and \\S are not supported inside [...]: list what to match instead")
                if len(members) != 1 or spans:  # \d, \w, \s: their members join the class
                    chars, ranges = chars + members, ranges + list(spans)
                    continue
                c = members
            elif c == "[":
                raise self.fail("'[' inside [...] must be escaped (\\[): POSIX classes such as [:alpha:] are not supported")
            if self.peek() == "-" and self.text[self.pos + 1:self.pos + 2] not in ("", "]"):
                self.pos += 1
                hi = self.peek()
                if hi == "\\" or hi == "[":
                    raise self.fail("a range in [...] must end in a plain character")
                self.pos += 1
                if hi < c:
                    raise self.fail(f"the range {c}-{hi} is backwards: write {hi}-{c}")
                ranges.append((c, hi))
            else:
                chars += c
        return (negated, chars, tuple(ranges))


class Pattern:
    """A compiled pattern: ``fullmatch(name)``, linear in ``len(name) * len(pattern)``."""

    def __init__(self, text: str):
        if len(text) > MAX_PATTERN:
            raise PatternInvalid(f"the pattern is {len(text)} characters long: at most {MAX_PATTERN}")
        self.text = text
        skip = 1 if text.startswith("^") else 0
        body = text[skip:]
        if body.endswith("$") and (len(body) - 1 - len(body[:-1].rstrip("\\"))) % 2 == 0:  # not an escaped \$
            body = body[:-1]
        b = _Builder(body, skip)
        start, dangling = b.alt()
        if b.pos < len(body):  # only an unmatched ')' ends alt() early
            raise b.fail("')' closes no group: escape it (\\)) or add '(' before it")
        b.patch(dangling, b.state("m"))
        self.start, self.states = start, b.states

    def _closure(self, seeds: List[int]) -> FrozenSet[int]:
        seen, stack = set(), list(seeds)
        while stack:
            s = stack.pop()
            if s in seen:
                continue
            seen.add(s)
            state = self.states[s]
            if state[3] == "s":
                stack.extend((state[1], state[2]))
        return frozenset(seen)

    def fullmatch(self, name: str) -> bool:
        current = self._closure([self.start])
        for c in name:
            current = self._closure([self.states[s][1] for s in current
                                     if self.states[s][3] == "c" and _accepts(self.states[s][0], c)])
            if not current:
                return False
        return any(self.states[s][3] == "m" for s in current)
