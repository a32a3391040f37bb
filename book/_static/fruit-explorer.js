/*
 * Lesson 4's fruit attention explorer, computed in the page: no kernel, nothing fetched.
 *
 * The lesson's cell (attn.course.explorer.page_explorer) writes <div class="fruit-explorer" data-explorer="...">
 * holding the fruit table as JSON. This script builds the controls inside it and recomputes, on every
 * change, what attn.course.explorer.fruit_attention computes: scores = keys . query, divided by sqrt(d_k) when
 * scaling is on, then by the temperature; a max-subtracted softmax; output = weights . values.
 */
(function () {
  "use strict";

  /** Weights, output and chosen item for one setting (the same steps as attn.course.explorer.fruit_attention). */
  function fruitAttention(data, query, scaled, temperature) {
    if (!(temperature > 0)) {
      throw new RangeError("temperature must be positive, got " + temperature);
    }
    const dk = query.length;
    const scores = data.keys.map(function (key) {
      let total = 0;
      for (let j = 0; j < dk; j++) total += key[j] * query[j];
      return scaled ? total / Math.sqrt(dk) : total;
    });
    const tempered = scores.map(function (score) { return score / temperature; });
    const largest = Math.max.apply(null, tempered);
    const exps = tempered.map(function (score) { return Math.exp(score - largest); });
    const sum = exps.reduce(function (a, b) { return a + b; }, 0);
    const weights = exps.map(function (e) { return e / sum; });
    const output = data.values[0].map(function (_, column) {
      let total = 0;
      for (let i = 0; i < weights.length; i++) total += weights[i] * data.values[i][column];
      return total;
    });
    let best = 0;
    for (let i = 1; i < weights.length; i++) if (weights[i] > weights[best]) best = i;
    return { scores: scores, weights: weights, output: output, best: best };
  }

  function element(tag, attributes, children) {
    const node = document.createElement(tag);
    Object.keys(attributes || {}).forEach(function (name) { node.setAttribute(name, attributes[name]); });
    (children || []).forEach(function (child) {
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    });
    return node;
  }

  function slider(id, label, range, value) {
    const input = element("input", {
      type: "range", id: id, min: range.min, max: range.max, step: range.step, value: value,
    });
    const shown = element("output", { for: id, class: "fe-value" });
    const row = element("div", { class: "fe-control" }, [element("label", { for: id }, [label]), input, shown]);
    return { row: row, input: input, shown: shown };
  }

  function build(root, index) {
    const data = JSON.parse(root.getAttribute("data-explorer"));
    const prefix = "fruit-explorer-" + index;
    root.textContent = "";

    const queryControls = data.keyAttributes.map(function (name, j) {
      return slider(prefix + "-" + name, name, data.querySlider, data.query[j]);
    });
    const scaledId = prefix + "-scaled";
    const scaledBox = element("input", { type: "checkbox", id: scaledId, checked: "" });
    const scaledRow = element("div", { class: "fe-control fe-checkbox" }, [
      scaledBox, element("label", { for: scaledId }, ["divide the scores by \u221Ad\u2096 = \u221A" + data.keys[0].length]),
    ]);
    const temperature = slider(prefix + "-temperature", "temperature", data.temperatureExponent, 0);

    const controls = element("fieldset", { class: "fe-controls" }, [
      element("legend", {}, ["The query and the softmax"]),
    ].concat(queryControls.map(function (c) { return c.row; }), [scaledRow, temperature.row]));

    const rows = data.names.map(function (name) {
      const bar = element("span", { class: "fe-bar" });
      const number = element("span", { class: "fe-number", "data-fe": "weight-" + name });
      const row = element("div", { class: "fe-row" }, [
        element("span", { class: "fe-name" }, [name]),
        element("span", { class: "fe-track" }, [bar]),
        number,
      ]);
      return { row: row, bar: bar, number: number };
    });
    const choice = element("strong", { "data-fe": "choice" });
    const outputs = data.valueAttributes.map(function (name) {
      return element("span", { class: "fe-number", "data-fe": "output-" + name });
    });
    const outputLine = element("p", { class: "fe-output" }, ["Output: "]);
    data.valueAttributes.forEach(function (name, j) {
      if (j > 0) outputLine.appendChild(document.createTextNode(", "));
      outputLine.appendChild(element("span", { class: "fe-pair" }, [name + " ", outputs[j]]));
    });
    const results = element("div", { class: "fe-results", "aria-live": "polite" }, [
      element("p", { class: "fe-heading" }, ["Weights"]),
    ].concat(rows.map(function (r) { return r.row; }), [
      element("p", { class: "fe-choice" }, ["Chosen item (largest weight): ", choice]),
      outputLine,
    ]));

    root.appendChild(controls);
    root.appendChild(results);
    root.classList.add("fe-ready");

    function update() {
      const query = queryControls.map(function (c) { return parseFloat(c.input.value); });
      const exponent = parseFloat(temperature.input.value);
      const tau = Math.pow(10, exponent);
      queryControls.forEach(function (c, j) { c.shown.textContent = query[j].toFixed(2); });
      temperature.shown.textContent = tau.toFixed(2);
      // The slider moves the temperature's exponent; what it announces is the temperature itself.
      temperature.input.setAttribute("aria-valuetext", tau.toFixed(2));
      const result = fruitAttention(data, query, scaledBox.checked, tau);
      rows.forEach(function (r, i) {
        const weight = result.weights[i];
        r.bar.style.width = (100 * weight).toFixed(1) + "%";
        r.bar.style.backgroundColor = i === result.best ? data.colours.highlight : data.colours.bar;
        r.number.textContent = weight.toFixed(3);
        r.number.setAttribute("data-value", String(weight));
        r.row.classList.toggle("fe-best", i === result.best);
      });
      choice.textContent = data.names[result.best];
      result.output.forEach(function (number, j) {
        outputs[j].textContent = number.toFixed(3);
        outputs[j].setAttribute("data-value", String(number));
      });
      root.setAttribute("data-temperature", String(tau));
    }

    queryControls.concat([temperature]).forEach(function (c) { c.input.addEventListener("input", update); });
    scaledBox.addEventListener("change", update);
    update();
  }

  window.fruitExplorer = { attention: fruitAttention };

  function start() {
    document.querySelectorAll(".fruit-explorer[data-explorer]").forEach(build);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
