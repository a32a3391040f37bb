/*
 * Small reading fixes for every page of the book, applied once the page has loaded:
 * - exercise titles read "Exercise 1.1: ..." (sphinx-exercise writes "Exercise (1.1: ...)" for unnumbered
 *   exercises), and the "Solution to" link no longer starts with an underlined space;
 * - a table wider than its column says so: a hint above it, and the table scrolls sideways in its own box
 *   (the box can be focused and scrolled with the keyboard); so does a displayed formula;
 * - a name in inline code may break after a "." or "_" (a <wbr>), so that a narrow column wraps
 *   attn.MultiHeadAttention as "attn." and "MultiHeadAttention", not two letters a line;
 * - on a phone, following a link in a sidebar drawer (the book's pages, or this page's contents) closes the
 *   drawer, so the section the reader asked for is what they see;
 * - a page with lesson 4's explorer gets a second skip link, to jump to it from the keyboard;
 * - accessibility fixes to the theme's markup (axe-core's findings): the search field and the colour-mode
 *   switch are named by what they show, the sidebar with the book's title is a landmark, each scrolling
 *   table's region has its own name, and the reference list's entries are list items;
 * - search results' snippets read as text: formulas without their TeX (\(\tau > 0\) reads "τ > 0"), and
 *   without the print-only table of contents ("Contents") that every lesson's snippet started with;
 * - the colour-mode switch cycles light -> dark -> system settings (the theme's light -> system -> dark
 *   changed nothing visible on the first click on a light system);
 * - a code block or output that scrolls sideways can be reached with the keyboard as soon as the formulas are
 *   typeset (the theme marks them too, but 300 ms after the page last changed).
 */
(function () {
  "use strict";

  function textNodes(root) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    const nodes = [];
    while (walker.nextNode()) nodes.push(walker.currentNode);
    return nodes;
  }

  /** "Exercise (1.1: Title)" -> "Exercise 1.1: Title", in exercise and solution titles alike. */
  function tidyExerciseTitle(title) {
    const nodes = textNodes(title).filter(function (node) {
      return node.nodeValue.trim() && !node.parentElement.closest("button");
    });
    const opening = nodes.findIndex(function (node) { return /Exercise \(/.test(node.nodeValue); });
    if (opening < 0) return;
    const closing = nodes.length - 1;
    if (!/\)\s*$/.test(nodes[closing].nodeValue)) return;
    nodes[closing].nodeValue = nodes[closing].nodeValue.replace(/\)\s*$/, "");
    const node = nodes[opening];
    node.nodeValue = node.nodeValue.replace("Exercise (", "Exercise ");
    // A link whose text starts with a space underlines the space: move it before the link.
    const link = node.parentElement.closest("a");
    if (link && link.contains(node) && /^\s/.test(node.nodeValue)) {
      node.nodeValue = node.nodeValue.replace(/^\s+/, "");
      link.parentNode.insertBefore(document.createTextNode(" "), link);
      const before = link.previousSibling.previousSibling;
      if (before && before.nodeType === Node.TEXT_NODE) before.nodeValue = before.nodeValue.replace(/\s+$/, "");
    }
  }

  /** Mark tables wider than their box, so that the hint shows and the box can be scrolled by keyboard. */
  function markWideTables() {
    const used = new Set();
    document.querySelectorAll(".bd-article .pst-scrollable-table-container").forEach(function (box) {
      const wide = box.scrollWidth > box.clientWidth + 1;
      box.classList.toggle("table-scrolls", wide);
      if (wide) {
        box.setAttribute("tabindex", "0");
        box.setAttribute("role", "region");
        box.setAttribute("aria-label", tableRegionName(box, used));
      } else {
        box.removeAttribute("tabindex");
        box.removeAttribute("role");
        box.removeAttribute("aria-label");
      }
      scrollHint(box, "table", wide);
    });
  }

  /** The line above a wide table or formula that says it scrolls sideways ("table-scroll-hint" or
   *  "math-scroll-hint"): added the first time it is needed, then shown only while ``wide``. */
  function scrollHint(box, what, wide) {
    const className = (what === "formula" ? "math" : what) + "-scroll-hint";
    let hint = box.previousElementSibling;
    if (!hint || !hint.classList.contains(className)) {
      if (!wide) return;
      hint = document.createElement("p");
      hint.className = className;
      hint.textContent = "Scroll the " + what + " sideways to see all of it \u2192";
      box.parentNode.insertBefore(hint, box);
    }
    hint.hidden = !wide;
  }

  /** Let names in inline code break after "." and "_" (followed by more of the name), and nowhere else; mark
   *  short code (SHORT_CODE characters or fewer, such as `key == query`), which course.css keeps on one line
   *  at desktop widths. */
  const SHORT_CODE = 30;
  function breakableNames() {
    document.querySelectorAll(".bd-article code.literal").forEach(function (code) {
      if (code.textContent.trim().length <= SHORT_CODE) code.classList.add("code-short");
      textNodes(code).forEach(function (node) {
        const parts = node.nodeValue.split(/(?<=[._])(?=\w)/);
        if (parts.length < 2) return;
        const fragment = document.createDocumentFragment();
        parts.forEach(function (part, index) {
          if (index > 0) fragment.appendChild(document.createElement("wbr"));
          fragment.appendChild(document.createTextNode(part));
        });
        node.parentNode.replaceChild(fragment, node);
      });
    });
  }

  /** Mark displayed formulas wider than their column (MathJax's container scrolls): a hint above, and the
   *  container can be focused and scrolled with the keyboard. */
  function markWideFormulas() {
    document.querySelectorAll(".bd-article div.math").forEach(function (box) {
      const scroller = box.querySelector(":scope > mjx-container");
      if (!scroller) return;
      const wide = scroller.scrollWidth > scroller.clientWidth + 1;
      box.classList.toggle("math-scrolls", wide);
      if (wide && !scroller.hasAttribute("tabindex")) scroller.setAttribute("tabindex", "0");
      scrollHint(box, "formula", wide);
    });
  }

  /** Close a sidebar drawer (a <dialog>) when one of its links is followed. */
  function closeDrawersOnLinks() {
    document.addEventListener("click", function (event) {
      const link = event.target.closest && event.target.closest("dialog[open] a[href]");
      if (!link) return;
      const drawer = link.closest("dialog");
      const hash = link.hash && link.pathname === window.location.pathname ? link.hash : "";
      drawer.close();
      if (!hash) return;
      // The theme gives focus back to the toggle when the drawer closes; send it on to the section instead,
      // once the page has jumped there.
      window.requestAnimationFrame(function () {
        const target = document.getElementById(decodeURIComponent(hash.slice(1)));
        if (!target) return;
        if (!target.hasAttribute("tabindex")) target.setAttribute("tabindex", "-1");
        target.focus({ preventScroll: true });
        target.scrollIntoView();
      });
    }, true);
  }

  /** A skip link to lesson 4's explorer, after the theme's "Skip to main content". */
  function skipToExplorer() {
    const explorer = document.querySelector(".fruit-explorer");
    const themeSkip = document.getElementById("pst-skip-link");
    if (!explorer || !themeSkip) return;
    if (!explorer.id) explorer.id = "fruit-explorer";
    explorer.setAttribute("tabindex", "-1");
    const wrapper = document.createElement("div");
    wrapper.className = "skip-link d-print-none course-skip-explorer";
    const link = document.createElement("a");
    link.href = "#" + explorer.id;
    link.textContent = "Skip to the fruit explorer";
    link.addEventListener("click", function (event) {
      event.preventDefault();
      explorer.scrollIntoView();
      explorer.focus({ preventScroll: true });
      history.replaceState(null, "", link.href);
    });
    wrapper.appendChild(link);
    themeSkip.after(wrapper);
  }

  const MODE_NAMES = { light: "light", dark: "dark", auto: "system settings" };

  /** The theme's colour-mode cycle on a light system is light -> auto -> dark: the first click changes
   *  nothing a reader can see. Go instead to the other look first, then to the system's settings. */
  function colourModeSwitch() {
    const buttons = document.querySelectorAll(".theme-switch-button");
    if (!buttons.length) return;
    const system = window.matchMedia("(prefers-color-scheme: dark)");
    function label() {
      const mode = document.documentElement.dataset.mode || "light";
      buttons.forEach(function (button) {
        button.setAttribute("aria-label", "Colour mode: " + MODE_NAMES[mode]);
      });
    }
    function apply(mode) {
      const theme = mode === "auto" ? (system.matches ? "dark" : "light") : mode;
      document.documentElement.dataset.mode = mode;
      document.documentElement.dataset.theme = theme;
      document.querySelectorAll(".dropdown-menu").forEach(function (menu) {
        menu.classList.toggle("dropdown-menu-dark", theme === "dark");
      });
      localStorage.setItem("mode", mode);
      localStorage.setItem("theme", theme);
      system.onchange = mode === "auto" ? function () { apply("auto"); } : null;
      label();
    }
    buttons.forEach(function (button) {
      // The icons' titles ("Light") are not the button's name; the name says the mode (below).
      button.querySelectorAll("i.theme-switch").forEach(function (icon) {
        icon.removeAttribute("title");
        icon.setAttribute("aria-hidden", "true");
      });
      button.addEventListener("click", function (event) {
        event.stopImmediatePropagation();
        // light -> dark -> system settings: from the book's default (light) the first click shows the dark
        // look on any system, and every mode stays one or two clicks away.
        const order = ["light", "dark", "auto"];
        const mode = document.documentElement.dataset.mode || "light";
        apply(order[(order.indexOf(mode) + 1) % order.length]);
      }, true);
    });
    label();
  }

  /** Blocks that scroll sideways or down take keyboard focus (so that the keyboard can scroll them). */
  function focusableScrollers() {
    document.querySelectorAll(".bd-article pre, .bd-article .cell_output > .output").forEach(function (box) {
      const scrolls = box.scrollWidth > box.clientWidth || box.scrollHeight > box.clientHeight;
      box.tabIndex = scrolls ? 0 : -1;
    });
  }

  /** Fixes to the theme's and the bibliography's markup that axe-core reports. */
  function accessibleMarkup() {
    // The sidebar search field shows "Search Ctrl+K": its name must contain what it shows (no aria-label).
    document.querySelectorAll(".search-button-field[aria-label]").forEach(function (button) {
      button.removeAttribute("aria-label");
    });
    // The book's title (the logo link) sits in the primary sidebar, outside any landmark.
    const sidebar = document.getElementById("pst-primary-sidebar");
    if (sidebar && !sidebar.hasAttribute("role")) {
      sidebar.setAttribute("role", "complementary");
      sidebar.setAttribute("aria-label", "The book");
    }
    // sphinxcontrib-bibtex writes role="list" with role="doc-biblioentry" entries (deprecated in ARIA 1.3,
    // and not list items): the entries become list items.
    document.querySelectorAll('.citation-list[role="list"] > .citation[role="doc-biblioentry"]').forEach(function (entry) {
      entry.setAttribute("role", "listitem");
    });
  }

  /** A scrolling table's region is named after its caption or its section, and no two share a name. */
  function tableRegionName(box, used) {
    const caption = box.querySelector("caption");
    let section = box.closest("section");
    let heading = section && section.querySelector(":scope > h1, :scope > h2, :scope > h3, :scope > h4");
    let about = caption ? caption.textContent : heading ? heading.textContent : "";
    about = about.replace(/[#\u00b6]/g, "").replace(/\s+/g, " ").trim();
    let name = "Table" + (about ? ": " + about : "") + ", scrolls sideways";
    for (let count = 2; used.has(name); count++) {
      name = "Table " + count + (about ? ": " + about : "") + ", scrolls sideways";
    }
    used.add(name);
    return name;
  }

  // TeX commands a snippet may show, as the characters they typeset.
  const TEX_SYMBOLS = {
    alpha: "\u03b1", beta: "\u03b2", gamma: "\u03b3", delta: "\u03b4", epsilon: "\u03b5", theta: "\u03b8",
    lambda: "\u03bb", mu: "\u03bc", pi: "\u03c0", sigma: "\u03c3", tau: "\u03c4", phi: "\u03c6", omega: "\u03c9",
    Delta: "\u0394", Sigma: "\u03a3", sum: "\u03a3", prod: "\u03a0", infty: "\u221e", times: "\u00d7",
    cdot: "\u00b7", cdots: "\u22ef", ldots: "\u2026", dots: "\u2026", approx: "\u2248", neq: "\u2260", ne: "\u2260",
    le: "\u2264", leq: "\u2264", ge: "\u2265", geq: "\u2265", to: "\u2192", rightarrow: "\u2192", in: "\u2208",
    sqrt: "\u221a", odot: "\u2299", top: "\u1d40", R: "\u211d", ell: "\u2113", log: "log", exp: "exp",
    max: "max", min: "min", softmax: "softmax", quad: " ", qquad: " ", lvert: "|", rvert: "|", mid: "|",
  };

  /** Formula source (TeX) as plain text a reader can follow, for search snippets. */
  function texToText(tex) {
    return tex
      .replace(/^\s*(\\\(|\\\[|\$\$?)|(\\\)|\\\]|\$\$?)\s*$/g, "")
      .replace(/\\(?:text|mathrm|mathbf|mathit|mathbb|operatorname|textrm|texttt|boldsymbol)\s*\{([^{}]*)\}/g, "$1")
      .replace(/\\frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}/g, "($1)/($2)")
      .replace(/\\(left|right|big|Big|bigg|Bigg)\b\s*/g, "")
      .replace(/\\([A-Za-z]+)/g, function (whole, name) { return name in TEX_SYMBOLS ? TEX_SYMBOLS[name] : name; })
      .replace(/\\([{}_%#&$,;:! ])/g, function (whole, character) { return /[,;:! ]/.test(character) ? " " : character; })
      .replace(/[{}]/g, "")
      .replace(/\s+/g, " ")
      .trim();
  }

  /** Sphinx's search builds each snippet from the page's text: leave out what only print shows, and write
   *  formulas as text instead of TeX. */
  function readableSearchSnippets() {
    // searchtools.js declares Search with const: a global name, not a property of window.
    if (typeof Search === "undefined" || typeof Search.htmlToText !== "function") return;
    const original = Search.htmlToText;
    Search.htmlToText = function (htmlString, anchor) {
      const page = new DOMParser().parseFromString(htmlString, "text/html");
      page.querySelectorAll("#jb-print-docs-body, .toggle-button, .copybtn, .math-scroll-hint, .table-scroll-hint")
        .forEach(function (node) { node.remove(); });
      page.querySelectorAll("span.math, div.math").forEach(function (math) {
        math.textContent = " " + texToText(math.textContent) + " ";
      });
      return original.call(this, page.documentElement.outerHTML, anchor).replace(/\s+/g, " ");
    };
  }

  function start() {
    readableSearchSnippets();
    closeDrawersOnLinks();
    skipToExplorer();
    colourModeSwitch();
    accessibleMarkup();
    breakableNames();
    markWideFormulas();
    const formulas = new ResizeObserver(function () { window.requestAnimationFrame(markWideFormulas); });
    document.querySelectorAll(".bd-article div.math").forEach(function (box) { formulas.observe(box); });
    focusableScrollers();
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(function () {
        markWideFormulas();
        focusableScrollers();
      });
    }
    document.querySelectorAll(".exercise > .admonition-title, .solution > .admonition-title").forEach(tidyExerciseTitle);
    markWideTables();
    // Widths change with the window and when MathJax typesets the formulas inside a table.
    const observer = new ResizeObserver(function () { window.requestAnimationFrame(markWideTables); });
    document.querySelectorAll(".bd-article .pst-scrollable-table-container").forEach(function (box) {
      observer.observe(box);
      if (box.firstElementChild) observer.observe(box.firstElementChild);
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
