'use strict';
/*
 * Errors as a notebook shows them: {name, value, traceback} with the
 * runtime's frames removed and the failing line of the cell (of the recent
 * cells it remembers) shown on top.
 */

const { RUNTIME_DIR, CELL_FRAME, INSPECT_OPTIONS, cellName, safeString } = require('./current');
const { inspect, isNativeError, ObjectDefineProperty, ObjectGetOwnPropertyDescriptor } = require('./primordials');

/** Recent cells' sources, to show the failing line. */
const cellSources = new Map();
const MAX_CELL_SOURCES = 500;

function rememberCell(count, code) {
  if (code.length > 1 << 20) return; // a huge cell only loses the source line in its tracebacks
  cellSources.set(count, code);
  if (cellSources.size > MAX_CELL_SOURCES) cellSources.delete(cellSources.keys().next().value);
}

const isFrame = (line) => /^\s+at /.test(line);

/**
 * Frames of the runtime: its files, node:vm, and lines of a cell that are not
 * the user's (0 and past the end: the async wrapper's).
 */
function isRuntimeFrame(line) {
  if (line.includes(RUNTIME_DIR) || /\bnode:vm[:)]/.test(line)) return true;
  const m = CELL_FRAME.exec(line);
  if (!m) return false;
  const src = cellSources.get(Number(m[1]));
  const lineNo = Number(m[2]);
  return lineNo < 1 || (src !== undefined && lineNo > src.split(/\r\n|[\n\r\u2028\u2029]/).length);
}

/** A stack without the runtime's frames (and the event loop's below the user's). */
function cleanStack(stack) {
  const lines = String(stack).split('\n');
  const out = [];
  for (const line of lines) {
    if (isFrame(line) && isRuntimeFrame(line)) {
      if (CELL_FRAME.test(line)) continue; // the async wrapper: user frames may follow
      break;
    }
    out.push(line);
  }
  while (out.length && isFrame(out[out.length - 1]) && /\(?node:internal\//.test(out[out.length - 1])) out.pop();
  return out.join('\n');
}

/** Node-style "Cell In[3]:2 / source line / caret" for the innermost cell frame. */
function sourceArrow(text) {
  for (const line of text.split('\n')) {
    if (!isFrame(line)) continue;
    const m = CELL_FRAME.exec(line);
    if (!m) continue;
    const src = cellSources.get(Number(m[1]));
    if (src === undefined) return [];
    const lineNo = Number(m[2]);
    const col = Number(m[3]);
    const srcLine = src.split(/\r\n|[\n\r\u2028\u2029]/)[lineNo - 1];
    if (srcLine === undefined || srcLine.length > 500 || col < 1) return [];
    return [`${cellName(m[1])}:${lineNo}`, srcLine, srcLine.slice(0, col - 1).replace(/[^\t]/g, ' ') + '^', ''];
  }
  return [];
}

/** {name, value, traceback} for an uncaught value; never throws. */
function describeError(err, isSyntax) {
  try {
    const errorLike = isNativeError(err) || (err !== null && typeof err === 'object' &&
      typeof safeString(() => err.stack, null) === 'string' && typeof safeString(() => err.message, null) === 'string');
    if (!errorLike) {
      const shown = safeString(() => inspect(err, INSPECT_OPTIONS), '<unprintable value>');
      return { name: 'Error', value: typeof err === 'string' ? err : shown, traceback: [`Uncaught ${shown}`] };
    }
    const name = safeString(() => err.name, '') || safeString(() => err.constructor.name, '') || 'Error';
    const value = safeString(() => err.message, '');
    const cleaned = cleanStack(safeString(() => err.stack, `${name}: ${value}`));
    let text = cleaned;
    if (!isSyntax) {
      // util.inspect adds what the stack lacks: own properties (code, errno,
      // path...) and the cause chain.
      const own = ObjectGetOwnPropertyDescriptor(err, 'stack');
      if (own && own.writable && own.configurable !== false) {
        try {
          err.stack = cleaned;
          text = inspect(err, INSPECT_OPTIONS);
        } catch (_) {
          text = cleaned;
        } finally {
          try { ObjectDefineProperty(err, 'stack', own); } catch (_) { /* frozen */ }
        }
      }
      text = text.split('\n').filter((l) => !(isFrame(l) && isRuntimeFrame(l))).join('\n');
      text = [...sourceArrow(text), text].join('\n');
    }
    return { name, value, traceback: text.split('\n') };
  } catch (_) {
    return { name: 'Error', value: '', traceback: ['Error: <the error could not be formatted>'] };
  }
}

module.exports = { rememberCell, describeError };
