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
   whatever colour the box is on: a theorem's tinted box, dark mode, paper). On a phone a
   figure or an exploration's picture wider than the column scrolls too (book.css): the same
   classes show a shadow on the edge that has more, and book-scrolls on the figure adds a line
   saying so under it.

3. Search snippets. Sphinx's search (searchtools.js, Sphinx 7.4) shows under each result the text
   of the page's [role=main] around the words found; there that text begins with the article's
   header (the download menu: ".ipynb .md .pdf", the page's title, "Contents") and formulas are
   their TeX source ("\(\overrightarrow{\mathbf{x}}\)"), since MathJax typesets them only in the
   browser. Search.htmlToText is wrapped: the header, navigation, buttons and code cells (their
   source and printouts) are removed first,
   and each formula is replaced by a plain reading of its TeX (commands dropped, Greek letters
   and common symbols as characters).

4. Tables with a status column (the Reproductions page's six or seven columns): on a phone
   (book.css) each row is set as a card, each cell on its own line after its column's header,
   which is copied here onto each cell as data-label; the "ours" and "status" columns were off
   the screen to the right.
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
  // formulas, and (on a phone, book.css) figures and explorations' pictures
  const PICTURES = "figure > a.image-reference, .slider-grid-frame";
  const SCROLLERS = `div.math > mjx-container, span.math.book-wide, ${PICTURES}`;
  const mark = (box) => {
    const room = box.scrollWidth - box.clientWidth;
    box.classList.toggle("book-more-left", room > 1 && box.scrollLeft > 1);
    box.classList.toggle("book-more-right", room > 1 && box.scrollLeft < room - 1);
    if (box.matches(PICTURES)) {
      const holder = box.closest("figure, .slider-grid");
      if (holder) holder.classList.toggle("book-scrolls", room > 1);
    }
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
    // a picture gets its width when it has loaded (an exploration's when a slider first sets it)
    document.querySelectorAll(`${PICTURES.replace(/, /g, " img, ")} img`).forEach((img) => {
      img.addEventListener("load", later);
    });
    if (document.fonts && document.fonts.ready) document.fonts.ready.then(later);
  });

  // --- 4. Tables with a status column (the Reproductions page's) ---
  // Six or seven columns do not fit a phone: there (book.css) each row is a card with each cell
  // on its own line, labelled with its column's header; here the labels are copied onto cells.
  const stackTables = () => {
    document.querySelectorAll(".bd-article table").forEach((table) => {
      const heads = [...table.querySelectorAll("thead th")].map((th) => th.textContent.trim());
      if (!heads.includes("status")) return;
      table.classList.add("book-stack");
      table.querySelectorAll("tbody tr").forEach((row) => {
        [...row.children].forEach((cell, k) => {
          if (heads[k]) cell.setAttribute("data-label", heads[k]);
        });
      });
    });
  };
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", stackTables);
  } else {
    stackTables();
  }

  // --- 3. Search snippets ---
  const SYMBOLS = {
    alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε", zeta: "ζ",
    eta: "η", theta: "θ", vartheta: "θ", iota: "ι", kappa: "κ", lambda: "λ", mu: "μ", nu: "ν",
    xi: "ξ", pi: "π", rho: "ρ", varrho: "ρ", sigma: "σ", varsigma: "ς", tau: "τ", phi: "φ",
    varphi: "φ", chi: "χ", psi: "ψ", omega: "ω", Gamma: "Γ", Delta: "Δ", Theta: "Θ",
    Lambda: "Λ", Xi: "Ξ", Pi: "Π", Sigma: "Σ", Phi: "Φ", Psi: "Ψ", Omega: "Ω",
    sum: "∑", prod: "∏", int: "∫", infty: "∞", partial: "∂", nabla: "∇", le: "≤", leq: "≤",
    ge: "≥", geq: "≥", ne: "≠", neq: "≠", approx: "≈", sim: "∼", to: "→", rightarrow: "→",
    in: "∈", times: "×", cdot: "·", pm: "±", top: "⊤", sqrt: "√", ell: "ℓ", dots: "…",
    ldots: "…", cdots: "⋯", langle: "⟨", rangle: "⟩", lVert: "‖", rVert: "‖", Vert: "‖",
    "|": "‖", quad: " ", qquad: " ", ",": " ", ";": " ", "!": "", " ": " ",
  };
  // a formula's TeX as plain text: delimiters, environments and unknown commands dropped
  const plainTeX = (tex) =>
    tex
      .replace(/\\[()[\]]/g, " ")
      .replace(/\\\\/g, "; ")
      .replace(/&/g, " ")
      .replace(/\\(?:begin|end)\{[^}]*\}/g, " ")
      .replace(/\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])/g, "")
      .replace(/\\([A-Za-z]+|[|,;! ])/g, (_, name) => (name in SYMBOLS ? SYMBOLS[name] : ""))
      .replace(/\\([{}_%#$])/g, "$1")
      .replace(/[{}]/g, "")
      .replace(/\s+/g, " ")
      .trim();
  const SEARCH_SKIP = [
    ".bd-header-article", ".header-article-items", ".article-header-buttons", ".dropdown-menu",
    ".bd-sidebar-secondary", ".bd-toc", ".prev-next-area", ".bd-footer-article", "nav",
    "button", ".headerlink", "script", "style", ".cell_input", ".cell_output pre",
    "div.highlight",
  ].join(", ");
  document.addEventListener("DOMContentLoaded", () => {
    // `Search` is searchtools.js's global (a lexical binding on search.html only)
    if (typeof Search === "undefined" || typeof Search.htmlToText !== "function") return;
    const original = Search.htmlToText;
    Search.htmlToText = (htmlString, anchor) => {
      const parsed = new DOMParser().parseFromString(htmlString, "text/html");
      parsed.querySelectorAll(SEARCH_SKIP).forEach((el) => el.remove());
      parsed.querySelectorAll(".math").forEach((el) => {
        el.textContent = ` ${plainTeX(el.textContent.trim())} `;
      });
      return original(parsed.documentElement.outerHTML, anchor);
    };
  });
})();
