# SPDX-License-Identifier: MIT
"""Puts one bench script's section into bench/RESULTS.md:

    replace_section.py NAME RESULTS_FILE SECTION_TEXT

SECTION_TEXT starts with "<!-- NAME:begin -->" and ends with "<!-- NAME:end -->"; the text
between those markers in RESULTS_FILE is replaced, or the section is appended when absent. The
other sections are left as they are."""

import re
import sys


def main():
    name, path, section = sys.argv[1:4]
    text = open(path).read()
    pattern = re.compile(rf"<!-- {re.escape(name)}:begin -->.*?<!-- {re.escape(name)}:end -->",
                         re.S)
    if pattern.search(text):
        text = pattern.sub(lambda m: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as out:
        out.write(text)


if __name__ == "__main__":
    main()
