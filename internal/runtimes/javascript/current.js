'use strict';
/*
 * What the runtime's modules share: the running execution (if any), the
 * runtime's own files, how cells are named, and helpers that never throw.
 */

const path = require('path');

/** The runtime's directory: stack frames of files in it are the runtime's own. */
const RUNTIME_DIR = __dirname + path.sep;

/** Cells are compiled with this file name; stack frames show it. */
const cellName = (count) => `Cell In[${count}]`;
const CELL_FRAME = /Cell In\[(\d+)\]:(\d+):(\d+)/;

/** Options for text/plain of results, displayed values and errors. */
const INSPECT_OPTIONS = { depth: 4, colors: false, maxArrayLength: 200, maxStringLength: 100000, breakLength: 80 };

/** f()'s string, or fallback if it throws or is not a string. */
function safeString(f, fallback) {
  try {
    const v = f();
    return typeof v === 'string' ? v : fallback;
  } catch (_) {
    return fallback;
  }
}

module.exports = {
  /**
   * The running execution: {id, count, async (its synchronous part is
   * over), awaiting (its value), failure (what ended the wait), abort
   * (ends it)}; null between executions.
   */
  execution: null,
  RUNTIME_DIR,
  cellName,
  CELL_FRAME,
  INSPECT_OPTIONS,
  safeString,
};
