/*
 * attn-course: a JupyterLab 4 extension, written by hand as the module-federation container JupyterLab loads
 * (no build step): `init` receives JupyterLab's shared modules, `get("./extension")` returns the plugin.
 *
 * The course folds every solution by its notebook metadata (python -m attn.course.solutions). JupyterLab unfolds what
 * it runs, whatever the metadata says: running a Markdown cell sets inputHidden = false, and running a code cell
 * sets outputHidden = false. So "Run All" would show every solution's output and words. This plugin folds them
 * back: a solution's code cell that was folded when it was scheduled keeps its output folded (while it runs
 * too), and a solution's Markdown cell is folded again after it renders if the solution's code is still folded.
 * A solution the learner has unfolded (by clicking its dots) is left as it is.
 *
 * A solution is the cells from a Markdown cell with "```{solution-start}" to the next with "```{solution-end}".
 */
var _JUPYTERLAB = (window._JUPYTERLAB = window._JUPYTERLAB || {});
(function () {
  "use strict";
  const START = "```{solution-start}";
  const END = "```{solution-end}";
  let shareScope = null;

  function sharedModule(name) {
    const versions = shareScope[name];
    const keys = Object.keys(versions);
    const key = keys.find(version => versions[version].loaded) || keys[keys.length - 1];
    return Promise.resolve(versions[key].get()).then(factory => factory());
  }

  function source(cell) {
    return cell.model.sharedModel.getSource();
  }

  /** The cells of the solution that the cell at `index` belongs to, or null. */
  function solutionOf(cells, index) {
    let first = -1;
    for (let i = index; i >= 0; i--) {
      const text = source(cells[i]);
      if (i < index && text.includes(END)) return null;
      if (text.includes(START)) { first = i; break; }
    }
    if (first < 0) return null;
    for (let j = index; j < cells.length; j++) {
      const text = source(cells[j]);
      if (text.includes(END)) return cells.slice(first, j + 1);
      if (j > index && text.includes(START)) return null;
    }
    return null;
  }

  function plugin(notebookModule) {
    const actions = notebookModule.NotebookActions;
    const running = new Map();  // a folded solution code cell -> the handler keeping its output folded
    return {
      id: "attn-course:keep-solutions-folded",
      description: "Keeps the course's folded solutions folded when JupyterLab runs them.",
      autoStart: true,
      activate: function () {
        actions.executionScheduled.connect(function (_, args) {
          const cell = args.cell;
          if (cell.model.type !== "code" || !cell.inputHidden) return;
          const cells = args.notebook.widgets;
          if (!solutionOf(cells, cells.indexOf(cell))) return;
          const keep = function () { if (!cell.outputHidden) cell.outputHidden = true; };
          cell.model.outputs.changed.connect(keep);
          cell.model.stateChanged.connect(keep);
          running.set(cell, keep);
        });
        actions.executed.connect(function (_, args) {
          const cell = args.cell;
          const keep = running.get(cell);
          if (keep) {
            running.delete(cell);
            cell.model.outputs.changed.disconnect(keep);
            cell.model.stateChanged.disconnect(keep);
            cell.outputHidden = true;
            return;
          }
          if (cell.model.type !== "markdown") return;
          const cells = args.notebook.widgets;
          const solution = solutionOf(cells, cells.indexOf(cell));
          if (!solution) return;
          const code = solution.filter(other => other.model.type === "code");
          if (code.length === 0 || code.some(other => other.inputHidden)) cell.inputHidden = true;
        });
      },
    };
  }

  _JUPYTERLAB["attn-course"] = {
    init: function (scope) { shareScope = scope; },
    get: function (module) {
      if (module !== "./extension") return Promise.reject(new Error("attn-course has no module " + module));
      return sharedModule("@jupyterlab/notebook").then(notebook => function () {
        return { __esModule: true, default: plugin(notebook) };  // an ES module, as JupyterLab expects
      });
    },
  };
})();
