"""JUnit XML, so that any CI shows one test per benchmark case: `<testsuites>` with one
`<testsuite>` whose `<testcase>`s pass, fail (`<failure message=...>`) or are skipped. Every
name and message goes in through `toolkit.report.text.xml_text`: a control character in a case
name would make the file invalid XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field

from toolkit.report.text import xml_text as x


@dataclass(frozen=True)
class JUnitCase:
    name: str
    classname: str
    failure: str | None = None
    """Why the case fails; None when it passes."""
    skipped: str | None = None
    output: str = ""
    """The figures behind the verdict (system-out)."""
    properties: dict[str, str] = field(default_factory=dict)


def junit_xml(suite: str, cases: Sequence[JUnitCase]) -> str:
    failures = sum(1 for c in cases if c.failure is not None)
    skipped = sum(1 for c in cases if c.failure is None and c.skipped is not None)
    root = ET.Element("testsuites", name=x(suite), tests=str(len(cases)),
                      failures=str(failures), errors="0", skipped=str(skipped))
    node = ET.SubElement(root, "testsuite", name=x(suite), tests=str(len(cases)),
                         failures=str(failures), errors="0", skipped=str(skipped), time="0")
    for case in cases:
        element = ET.SubElement(node, "testcase", name=x(case.name),
                                classname=x(case.classname), time="0")
        if case.properties:
            props = ET.SubElement(element, "properties")
            for key, value in case.properties.items():
                ET.SubElement(props, "property", name=x(key), value=x(value))
        if case.failure is not None:
            ET.SubElement(element, "failure", message=x(case.failure),
                          type="benchmark").text = x(case.failure)
        elif case.skipped is not None:
            ET.SubElement(element, "skipped", message=x(case.skipped))
        if case.output:
            ET.SubElement(element, "system-out").text = x(case.output)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
