"""The reference list's order for the book: by first author's surname, a group author (written in braces in
references.bib, such as {DeepSeek-AI} or {Qwen Team}) by its whole name, as a reader looks for it.

pybtex's own author-year-title sort keeps the braces in its keys, and a brace sorts after every letter, so
group authors would all land at the end of the list. This style drops them from the keys, and nothing else.
"""

from pybtex.plugin import register_plugin
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.sorting.author_year_title import SortingStyle


class BracelessSorting(SortingStyle):
    def person_key(self, person):
        return super().person_key(person).replace("{", "").replace("}", "")


class CourseStyle(PlainStyle):
    default_sorting_style = "course_author_year_title"


def setup(app):
    register_plugin("pybtex.style.sorting", "course_author_year_title", BracelessSorting)
    register_plugin("pybtex.style.formatting", "course", CourseStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
