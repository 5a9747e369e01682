/* The book's own script (added to every page by tools/book_pages.py).

1. The sidebar toggles. pydata-sphinx-theme 0.17 puts a toggle button of its own, with the
   classes primary-toggle / secondary-toggle, into its top bar (hidden in sphinx-book-theme's
   layout), and both themes bind their click handlers with document.querySelector(), that is to
   that first, hidden button only: the buttons a reader sees (sphinx-book-theme's, in the article
   header) do nothing, and on a phone the table of contents cannot be opened at all. Upstream:
   pydata/pydata-sphinx-theme#2451 ("Mobile primary-sidebar toggle silently does nothing with some
   themes", open) and executablebooks/sphinx-book-theme#988 (fixes proposed in
   sphinx-book-theme#991 and #1000, not released). Until a release fixes it, a click on any other toggle
   is handed to the first one, so the themes' own handlers run: on a wide screen
   sphinx-book-theme's collapses the table of contents, on a narrow one pydata's opens it as a
   dialog (and the page contents' toggle opens the page contents the same way).

2. Scroll cues. A formula wider than its column (a display equation in its MathJax container, an
   inline formula in its span.math, which is marked book-wide so that it scrolls) scrolls sideways; a shadow on an edge says there is more on
   that side. The classes book-more-left / book-more-right are set here from the box's scroll
   position (book.css draws the shadows as inset box-shadows, which sit on the box's own edges
   whatever colour the box is on: a theorem's tinted box, dark mode, paper).
*/
(() => {
  "use strict";

  // --- 1. Sidebar toggles ---
  const TOGGLES = [".primary-toggle", ".secondary-toggle"];
  document.addEventListener(
    "click",
    (event) => {
      const target = event.target instanceof Element ? event.target : null;
      if (!target) return;
      for (const selector of TOGGLES) {
        const button = target.closest(selector);
        const bound = document.querySelector(selector); // the one the themes listen to
        if (!button || !bound || button === bound) continue;
        event.preventDefault();
        event.stopImmediatePropagation();
        bound.click();
        return;
      }
    },
    true,
  );

  // --- 2. Scroll cues ---
  const SCROLLERS = "div.math > mjx-container, span.math.book-wide";
  const mark = (box) => {
    const room = box.scrollWidth - box.clientWidth;
    box.classList.toggle("book-more-left", room > 1 && box.scrollLeft > 1);
    box.classList.toggle("book-more-right", room > 1 && box.scrollLeft < room - 1);
  };
  // an inline formula wider than its box (not an accent that overhangs it by a pixel or two)
  const widen = (span) => {
    const formula = span.querySelector("mjx-container");
    if (!formula) return;
    const wide = formula.getBoundingClientRect().width > span.clientWidth + 2;
    span.classList.toggle("book-wide", wide);
    if (!wide) span.classList.remove("book-more-left", "book-more-right");
  };
  const markAll = () => {
    document.querySelectorAll("span.math").forEach(widen);
    document.querySelectorAll(SCROLLERS).forEach(mark);
  };
  let pending = false;
  const later = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      markAll();
    });
  };
  document.addEventListener(
    "scroll",
    (event) => {
      if (event.target instanceof Element && event.target.matches(SCROLLERS)) mark(event.target);
    },
    true,
  );
  window.addEventListener("resize", later);
  // a block opened (a proof, a solution, a dropdown) changes the page's height: its formulas
  // get their widths only then
  if (window.ResizeObserver) new ResizeObserver(later).observe(document.body);
  window.addEventListener("load", () => {
    const startup = window.MathJax && window.MathJax.startup;
    const typeset = startup && startup.promise ? startup.promise : Promise.resolve();
    typeset.then(markAll, markAll);
    if (document.fonts && document.fonts.ready) document.fonts.ready.then(later);
  });
})();
