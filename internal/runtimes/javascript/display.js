'use strict';
/*
 * Rich output: the MIME bundle of a value (text/plain from util.inspect,
 * plus what its _repr_*_() or toHTML() methods give, as IPython's
 * formatters do), and display(), which sends bundles for the running
 * execution.
 */

const current = require('./current');
const { send } = require('./wire');
const {
  jsonStringify, jsonParse, BufferFrom, isBuffer, inspect, ObjectKeys, ObjectEntries,
  ObjectGetPrototypeOf, ObjectProto, hasOwn,
} = require('./primordials');

const { INSPECT_OPTIONS } = current;

/** Mirrors the server's check of MIME keys (runtimes.ValidMIME). */
function validMime(s) {
  return typeof s === 'string' && s.length > 0 && s.length <= 128 && /^[A-Za-z0-9.+_-]+\/[A-Za-z0-9.+_-]+$/.test(s);
}
const isJsonMime = (t) => t === 'application/json' || t.endsWith('+json');
const isBinaryMime = (t) => (t.startsWith('image/') && t !== 'image/svg+xml') || t === 'application/pdf';

function isPlainObject(v) {
  if (v === null || typeof v !== 'object') return false;
  const p = ObjectGetPrototypeOf(v);
  return p === null || p === ObjectProto;
}

/** One value of a MIME bundle in the wire form the protocol wants; undefined drops it. */
function mimeValue(type, v) {
  if (v === undefined || v === null) return undefined;
  if (isJsonMime(type)) {
    if (typeof v === 'string') {
      try { return jsonParse(v); } catch (_) { return v; }
    }
    const s = jsonStringify(v);
    return s === undefined ? undefined : jsonParse(s);
  }
  if (isBinaryMime(type)) {
    if (isBuffer(v)) return v.toString('base64');
    if (v instanceof Uint8Array || v instanceof ArrayBuffer) return BufferFrom(v).toString('base64');
    return String(v).replace(/\s+/g, '');
  }
  if (isBuffer(v)) return v.toString('utf8');
  return typeof v === 'string' ? v : String(v);
}

/** Adds the entries of a raw bundle {mime: value} to data. */
function addBundle(data, bundle) {
  for (const [k, v] of ObjectEntries(bundle)) {
    if (!validMime(k)) continue;
    const value = mimeValue(k, v);
    if (value !== undefined) data[k] = value;
  }
}

const REPR_METHODS = [
  ['text/html', '_repr_html_'], ['text/html', 'toHTML'], ['text/markdown', '_repr_markdown_'],
  ['image/svg+xml', '_repr_svg_'], ['image/png', '_repr_png_'], ['image/jpeg', '_repr_jpeg_'],
  ['text/latex', '_repr_latex_'], ['application/json', '_repr_json_'],
];

/**
 * The MIME bundle of a value: text/plain from util.inspect, plus what the
 * value's _repr_mimebundle_() and _repr_*_() (or toHTML()) methods return.
 * A failing method only costs its format.
 */
function formatValue(value) {
  const data = {};
  if (value !== null && (typeof value === 'object' || typeof value === 'function')) {
    try {
      if (typeof value._repr_mimebundle_ === 'function') {
        const b = value._repr_mimebundle_();
        if (isPlainObject(b)) addBundle(data, b);
      }
    } catch (_) { /* ignored */ }
    for (const [mime, method] of REPR_METHODS) {
      if (hasOwn(data, mime)) continue;
      try {
        if (typeof value[method] !== 'function') continue;
        const v = mimeValue(mime, value[method]());
        if (v !== undefined) data[mime] = v;
      } catch (_) { /* ignored */ }
    }
  }
  if (!hasOwn(data, 'text/plain')) data['text/plain'] = inspect(value, INSPECT_OPTIONS);
  return data;
}

/** The bundle display() sends for one object. */
function displayData(obj) {
  if (typeof obj === 'string') return { 'text/plain': obj };
  if (isPlainObject(obj)) {
    const keys = ObjectKeys(obj);
    if (keys.length && keys.every((k) => k.includes('/'))) {
      const data = {};
      addBundle(data, obj);
      if (ObjectKeys(data).length) return data;
    }
  }
  return formatValue(obj);
}

function publish(data) {
  const cur = current.execution;
  if (!cur) return; // outside an execution (a late timer): nothing to attach it to
  send({ type: 'display', id: cur.id, data, metadata: {} });
}

/**
 * display(value, ...) shows each value: a plain object whose keys are MIME
 * types is sent as that bundle, a string as text/plain, anything else as
 * its formatted bundle (util.inspect, _repr_html_, toHTML, ...).
 */
function display(...objs) {
  for (const obj of objs) publish(displayData(obj));
}
display.html = (s) => publish({ 'text/html': String(s) });
display.markdown = (s) => publish({ 'text/markdown': String(s) });
display.svg = (s) => publish({ 'image/svg+xml': String(s) });
display.png = (b) => publish({ 'image/png': mimeValue('image/png', b) });
display.jpeg = (b) => publish({ 'image/jpeg': mimeValue('image/jpeg', b) });
display.json = (v) => publish({ 'application/json': mimeValue('application/json', v), 'text/plain': inspect(v, INSPECT_OPTIONS) });
display.text = (s) => publish({ 'text/plain': String(s) });

module.exports = { formatValue, display };
