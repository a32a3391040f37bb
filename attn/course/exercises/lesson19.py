"""Lesson 19's exercises: where a position lives in a paged cache, what freeing a request gives back, and what a
round of greedy speculative decoding keeps.

Each names the mistakes the lesson warns of where they give another answer: a block table read one page off,
the page's index in the table taken for the page itself, freeing a page another request still shares, and
accepting the first rejected draft token (or carrying on past it). The expected value is never shown.
"""

import numpy as np

from attn.course.exercises.answers import Array, Number
from attn.course.exercises.directions import direction_only
from attn.course.exercises.judging import compare, matches
from attn.course.exercises.registry import exercise

# Exercise 19.1: a sequence's block table, pages of 16 positions, and the position asked about.
BLOCK_TABLE, PAGE_SIZE, POSITION = (7, 3, 9, 4), 16, 37
# Exercise 19.2: a pool of 10 pages; requests A, B, C share pages 0 and 1 (a system prompt), and own the rest.
POOL_PAGES, SHARED_PAGES = 10, (0, 1)
OWN_PAGES = {"A": (2, 3), "B": (4,), "C": (5, 6)}
LEAVING = ("A", "B")
# Exercise 19.3: one round of greedy speculative decoding: the draft's four guesses, the model's argmax after the
# newest token and after each guess (five rows of logits).
GUESSES, CHOICES = (5, 9, 2, 7), (5, 9, 4, 7, 1)


def _where(index_shift=0, table=True, offset_shift=0):
    """[page id, offset] of POSITION (a mistake: the table read ``index_shift`` pages off, or not read at all)."""
    index = POSITION // PAGE_SIZE + index_shift
    return np.array([BLOCK_TABLE[index] if table else index, POSITION % PAGE_SIZE + offset_shift], dtype=np.int64)


@exercise(
    "19.1",
    Array("your page and offset", kind="whole"),
    solution=_where,
    success="position 37 is the 6th position (offset 5) of the sequence's 3rd page, index 37 // 16 = 2 of its block "
            "table, and the table says which page of the pool that is; the slot in the pool is page * 16 + offset.",
)
def _page_and_offset(answer, expected):
    if answer.shape != (2,):
        return "give two whole numbers, [page id, offset]: the page of the pool, then the position inside it."
    if compare(answer, expected, "your page and offset") is None:
        return None
    for mistake, hint in (
        (_where(index_shift=1), "that page is one too far along the block table: an off-by-one page; the page "
                                "index is position // page_size, counted from 0"),
        (_where(index_shift=-1), "that page is one too early in the block table: an off-by-one page; the page "
                                 "index is position // page_size, counted from 0"),
        (_where(table=False), "that is the page's index in the block table, not the page of the pool: look the "
                              "index up in the table"),
        (_where(offset_shift=1), "the page is right, the offset is one too large: offsets count from 0, "
                                 "position % page_size"),
        (_where(offset_shift=-1), "the page is right, the offset is one too small: the offset is position % "
                                  "page_size"),
    ):
        if matches(answer, mistake):
            return hint + "."
    if answer[0] not in BLOCK_TABLE:
        return "that page is not in the sequence's block table: every page it reads is listed there."
    if answer[1] < 0 or answer[1] >= PAGE_SIZE:
        return "an offset lies between 0 and page_size - 1 = 15."
    if answer[0] == expected[0]:
        return "the page is right; the offset is not: position % page_size."
    return "that page holds other positions of the sequence: page index = position // page_size in the table."


def _free_after(free_shared=False, free_own=True):
    """Free pages once LEAVING have left (a mistake frees the shared pages with the first to leave)."""
    used = set(SHARED_PAGES) | {page for pages in OWN_PAGES.values() for page in pages}
    for name in LEAVING:
        if free_own:
            used -= set(OWN_PAGES[name])
        if free_shared:
            used -= set(SHARED_PAGES)
    return POOL_PAGES - len(used)


@exercise(
    "19.2",
    Number("your count", whole=True),
    solution=_free_after,
    success="A and B give back the three pages only they used; pages 0 and 1 lose two users but keep one, C, so "
            "their reference counts stay above 0 and they stay out of the free list.",
)
def _free_pages(count, expected):
    if count.shape != ():
        return "give one whole number: the free pages after A and B have left."
    if compare(count, np.asarray(expected), "your count") is None:
        return None
    before = POOL_PAGES - len(set(SHARED_PAGES)) - sum(len(p) for p in OWN_PAGES.values())
    for mistake, hint in (
        (_free_after(free_shared=True), "that frees the shared pages 0 and 1 while C still reads them: freeing a "
                                        "shared page; a page goes back only when its reference count reaches 0"),
        (before, "that is the count before anyone left: A's and B's own pages go back to the free list"),
        (before + len(OWN_PAGES["A"]), "that counts A leaving but not B"),
        (before + len(OWN_PAGES["B"]), "that counts B leaving but not A"),
        (POOL_PAGES, "that frees every page, C's too; C is still running"),
    ):
        if matches(count, mistake):
            return hint + "."
    return direction_only(count, expected, "your count")


def _kept(accept_rejected=False, past_rejection=False, with_own=True):
    """The tokens a greedy round adds (mistakes: keep the rejected guess, go on past it, or drop the model's own)."""
    kept = 0
    while kept < len(GUESSES) and GUESSES[kept] == CHOICES[kept]:
        kept += 1
    if past_rejection:
        return np.array(GUESSES + CHOICES[-1:], dtype=np.int64)
    tokens = list(GUESSES[:kept]) + ([GUESSES[kept]] if accept_rejected else [CHOICES[kept]] if with_own else [])
    return np.array(tokens, dtype=np.int64)


@exercise(
    "19.3",
    Array("your tokens", kind="whole"),
    solution=_kept,
    success="the guesses agree with the model's argmax up to the third; the model's own token replaces the third "
            "guess, and the rows after it were computed after a token the model did not choose, so they are unused.",
)
def _round_tokens(tokens, expected):
    if tokens.ndim != 1:
        return "give the tokens the round adds as one list of whole numbers, such as [1, 2]."
    if compare(tokens, expected, "your tokens") is None:
        return None
    for mistake, hint in (
        (_kept(accept_rejected=True), "that keeps the first guess the model disagreed with: accepting the first "
                                      "rejected draft token; at a disagreement the model's own token is taken"),
        (_kept(past_rejection=True), "that keeps every guess: a round stops at the first guess that is not the "
                                     "model's argmax"),
        (_kept(with_own=False), "that stops at the disagreement but adds nothing there: every round adds one token "
                                "of the model's own after the kept guesses"),
        (np.array(CHOICES, dtype=np.int64), "those are all five of the model's argmaxes; the ones after the "
                                            "disagreement were computed after a rejected guess and are discarded"),
    ):
        if matches(tokens, mistake):
            return hint + "."
    if tokens.size > len(GUESSES) + 1:
        return f"a round adds at most {len(GUESSES) + 1} tokens: the {len(GUESSES)} guesses and one of the model's."
    return "compare each guess with the model's argmax in the same row, in order, and stop at the first difference."
