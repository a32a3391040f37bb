/*
 * Small reading fixes for every page of the book, applied once the page has loaded:
 * - exercise titles read "Exercise 1.1: ..." (sphinx-exercise writes "Exercise (1.1: ...)" for unnumbered
 *   exercises), and the "Solution to" link no longer starts with an underlined space;
 * - a table wider than its column says so: a hint above it, and the table scrolls sideways in its own box
 *   (the box can be focused and scrolled with the keyboard); so does a displayed formula;
 * - a name in inline code may break after a "." or "_" (a <wbr>), so that a narrow column wraps
 *   attn.MultiHeadAttention as "attn." and "MultiHeadAttention", not two letters a line.
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
    document.querySelectorAll(".bd-article .pst-scrollable-table-container").forEach(function (box) {
      const wide = box.scrollWidth > box.clientWidth + 1;
      box.classList.toggle("table-scrolls", wide);
      if (wide) {
        box.setAttribute("tabindex", "0");
        box.setAttribute("role", "region");
        box.setAttribute("aria-label", "Table, scrolls sideways");
      } else {
        box.removeAttribute("tabindex");
        box.removeAttribute("role");
        box.removeAttribute("aria-label");
      }
      let hint = box.previousElementSibling;
      if (!hint || !hint.classList.contains("table-scroll-hint")) {
        hint = document.createElement("p");
        hint.className = "table-scroll-hint";
        hint.textContent = "Scroll the table sideways to see all of it \u2192";
        box.parentNode.insertBefore(hint, box);
      }
      hint.hidden = !wide;
    });
  }

  /** Let names in inline code break after "." and "_" (followed by more of the name), and nowhere else. */
  function breakableNames() {
    document.querySelectorAll(".bd-article code.literal").forEach(function (code) {
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
      let hint = box.previousElementSibling;
      if (!hint || !hint.classList.contains("math-scroll-hint")) {
        if (!wide) return;
        hint = document.createElement("p");
        hint.className = "math-scroll-hint";
        hint.textContent = "Scroll the formula sideways to see all of it \u2192";
        box.parentNode.insertBefore(hint, box);
      }
      hint.hidden = !wide;
    });
  }

  function start() {
    breakableNames();
    markWideFormulas();
    const formulas = new ResizeObserver(function () { window.requestAnimationFrame(markWideFormulas); });
    document.querySelectorAll(".bd-article div.math").forEach(function (box) { formulas.observe(box); });
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) MathJax.startup.promise.then(markWideFormulas);
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
