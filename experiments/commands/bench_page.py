"""The benchmarks page that `radix-auction bench` wrote, read back, and written again with some
sections regenerated alone (`--update`): the others kept as they are, and each regenerated section
named under the page's own provenance line with the command, date and machine that made it, since
that line no longer covers it."""

from __future__ import annotations

import re
from dataclasses import dataclass

REGENERATED = "Sections regenerated alone since:"
"""The header's line above its list of the sections regenerated alone."""
_ENTRY = re.compile(r'^- "(?P<title>[^"]+)": regenerated alone\. ')


@dataclass
class Page:
    """A page split at its `## ` headings: `header` (the lines before the first section, the list
    of regenerated sections left out), `regenerated` ({section title: its line in that list}),
    `sections` ({title: the section's text, heading included}, in the page's order)."""

    header: list[str]
    regenerated: dict[str, str]
    sections: dict[str, str]

    @classmethod
    def read(cls, text: str) -> Page:
        parts = re.split(r"^(?=## )", text, flags=re.MULTILINE)
        header, regenerated = [], {}
        for line in parts[0].splitlines():
            if entry := _ENTRY.match(line):
                regenerated[entry["title"]] = line
            elif line != REGENERATED:
                header.append(line)
        # Where the list was, two blank lines meet: one is kept.
        header = [line for i, line in enumerate(header) if line or i == 0 or header[i - 1]]
        return cls(header, regenerated, {part.splitlines()[0][3:]: part for part in parts[1:]})

    def holds_line(self, line: str) -> bool:
        """Whether the header holds `line` (the quick run's note, say)."""
        return line in self.header

    def with_sections(self, fresh: dict[str, str], order: list[str], made_by: str, hand_kept: str) -> str:
        """The page with the sections of `fresh` ({title: text}) in place of its own (where `order`,
        every section's title in the page's order, puts one it did not hold), each named in the
        list under the provenance line ("Made by ...") with `made_by`, and `hand_kept` (the last
        section, whole) in place of the page's last section."""
        regenerated = {**self.regenerated, **{t: f'- "{t}": regenerated alone. {made_by.strip()}' for t in fresh}}
        listed = [regenerated[t] for t in order if t in regenerated]
        at = next((i + 1 for i, line in enumerate(self.header) if line.startswith("Made by ")), 1)
        header = [*self.header[:at], *(["", REGENERATED, *listed] if listed else []), *self.header[at:]]
        sections = {**self.sections, **fresh}
        body = [sections[t].rstrip("\n") + "\n" for t in order if t in sections]
        return "\n".join([*header, *body, hand_kept])
