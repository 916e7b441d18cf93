'use strict';
/*
 * airlock's JavaScript session runtime: the persistent Node.js interpreter of
 * a session. The server starts it inside the sandbox as
 *
 *     node /opt/airlock/javascript/runtime.js
 *
 * and the contract is docs/runtime-protocol.md:
 *
 *   - fd 3 is the control socket: frames of a 4-byte big-endian length and
 *     UTF-8 JSON. The server sends configure, execute, run and shutdown; the
 *     runtime sends hello once, then per execution any number of display,
 *     at most one result, at most one error and exactly one done, last. A
 *     malformed frame makes the runtime exit 2.
 *   - fds 1 and 2 are the execution's stdout and stderr. process.stdout and
 *     process.stderr (and so console.*) are replaced by streams that write
 *     to them synchronously, so every byte an execution wrote is in the pipe
 *     before its done is sent. Frames on fd 3 are written synchronously too.
 *
 * Pure Node.js standard library; works on Node 18 and 20.
 *
 * Execution model (the decisions a notebook needs, documented here once):
 *
 *   - One context: cells run with vm.Script#runInThisContext, i.e. in the
 *     runtime's own realm, as the `node` REPL does. A separate vm context
 *     would make every object that Node's modules return belong to another
 *     realm (`fs.readdirSync('.') instanceof Array`, `err instanceof Error`
 *     and `Buffer.from('x') instanceof Uint8Array` would all be false) and
 *     would run require()d modules against other globals than the cell's.
 *     All of Node's globals (console, timers, setImmediate, queueMicrotask,
 *     URL, TextEncoder/Decoder, Buffer, process, structuredClone, fetch when
 *     Node has it, ...) are therefore there as usual; the runtime adds
 *     require (resolving from the current directory), module, exports,
 *     __filename ('[eval]') and __dirname ('.') like `node -e`, and display.
 *     The runtime keeps its own references to everything it uses, so a cell
 *     that replaces globals (JSON, Promise, console, ...) cannot break the
 *     protocol.
 *
 *   - Declarations persist and can be redeclared, like in a notebook: before
 *     compiling, a small tokenizer (below) rewrites the cell's top-level
 *     `let` and `const` to `var` (a `let x` without initializer becomes
 *     `var x = void 0`, so re-running it resets x) and a top-level
 *     `class C {}` to `var C = class C {};`. Top-level functions are already
 *     var-like. Consequences: top-level const bindings can be reassigned by
 *     later code, there is no temporal dead zone at the top level, and
 *     top-level declarations become properties of globalThis (as `var`
 *     does), and redeclaring a name within one cell is not an error either.
 *     Declarations inside blocks and functions are untouched.
 *     Static `import x from 'm'` / `import {a as b} from 'm'` /
 *     `import * as ns from 'm'` become require() calls, `export` keywords
 *     are dropped, and `import(...)` resolves from the current directory.
 *
 *   - Top-level await: a cell that awaits outside any function is wrapped
 *     as `(async () => { ... })()`; its top-level declarations (var, let,
 *     const, class, function, import) are hoisted out of the wrapper as
 *     globals first, so they persist as well (a `var` nested in a block or
 *     loop header of such a cell stays local to it). If the transform cannot
 *     make sense of a cell (it is a tokenizer, not a parser), the cell is
 *     compiled as written, so valid code still runs, only without these
 *     conveniences.
 *
 *   - The result is the value of the cell's final expression statement (none
 *     if the last statement is not an expression, or the value is
 *     undefined), formatted with util.inspect (depth 4, no colours), plus
 *     text/html & co. when the value has _repr_html_()/toHTML() or other
 *     _repr_*_ methods. A Promise result is awaited. A cell that is a single
 *     object literal (`{a: 1}`) is an expression, as in the node REPL.
 *
 *   - Errors: an uncaught exception (thrown, or rejecting the awaited
 *     promise) is sent as error {name, value, traceback} with the runtime's
 *     frames removed and the failing line of the cell shown on top, done
 *     has status error and exit_code 1. An exception thrown by a callback
 *     (timer, event, unhandled rejection) while the execution is still
 *     awaiting ends that execution the same way; when no execution runs, it
 *     is printed to stderr and the session goes on.
 *
 *   - process.exit(n) in user code does not end the runtime: it throws a
 *     SystemExit error that ends the execution. n == 0 is a clean stop
 *     (status ok, no error, like Python's sys.exit(0)); otherwise an error
 *     named SystemExit is sent and done has status error with exit_code
 *     n & 0xff (or 1 when that is 0). Code can catch it, as Python code can
 *     catch SystemExit. process.exit() while no execution runs is ignored.
 *
 *   - SIGINT during synchronous code stops it (vm's breakOnSigint); during a
 *     pending await the runtime stops waiting (the abandoned promise's work
 *     may go on in the background). Either way an error KeyboardInterrupt
 *     is sent, done has status interrupted and exit_code 1, and the state is
 *     kept. SIGINT while idle is ignored. Limits, both Node's: code that
 *     runs in a callback or a promise continuation (after the cell's first
 *     await) is not under breakOnSigint, so a busy loop there cannot be
 *     interrupted (the server ends the session after its grace period); and
 *     around every breakOnSigint run Node leaves SIGINT at its default action
 *     for some microseconds (between moving the process's SIGINT listeners
 *     aside and starting its watchdog thread, and between stopping the
 *     watchdog and putting the listeners back), so a SIGINT that lands
 *     exactly as a cell's synchronous part starts or ends can kill the
 *     runtime. The server treats that like any runtime death. A SIGINT
 *     while execSync waits for its child reaches the child (same process
 *     group) and, now and then, not the watchdog: the cell then ends with
 *     execSync's error for the child the signal killed.
 */

const fs = require('fs');
const net = require('net');
const path = require('path');
const url = require('url');
const util = require('util');
const vm = require('vm');
const Module = require('module');
const { Writable } = require('stream');
const { spawnSync } = require('child_process');
const { constants: osConstants } = require('os');

// --- references the runtime keeps (user code runs in this realm) ----------

const proc = process;
const realExit = process.exit.bind(process);
const { stringify: jsonStringify, parse: jsonParse } = JSON;
const BufferFrom = Buffer.from;
const BufferAlloc = Buffer.allocUnsafe;
const BufferConcat = Buffer.concat;
const isBuffer = Buffer.isBuffer;
const HostPromise = Promise;
const promiseRace = Promise.race.bind(Promise);
const hostSetImmediate = setImmediate;
const inspect = util.inspect;
const { isPromise, isNativeError } = util.types;
const ObjectKeys = Object.keys;
const ObjectEntries = Object.entries;
const ObjectValues = Object.values;
const ArrayIsArray = Array.isArray;
const ObjectGetPrototypeOf = Object.getPrototypeOf;
const ObjectDefineProperty = Object.defineProperty;
const ObjectGetOwnPropertyDescriptor = Object.getOwnPropertyDescriptor;
const ObjectProto = Object.prototype;
const hasOwn = (o, k) => ObjectProto.hasOwnProperty.call(o, k);
const utf8Decoder = new TextDecoder('utf-8', { fatal: true });

const LANGUAGE = 'javascript';
const CTL_FD = 3;
const MAX_FRAME = 64 << 20;
const RUNTIME_FILE = __filename;
/** Options for text/plain of results and displayed values. */
const INSPECT_OPTIONS = { depth: 4, colors: false, maxArrayLength: 200, maxStringLength: 100000, breakLength: 80 };
/** Cells are compiled with this file name; stack frames show it. */
const cellName = (count) => `Cell In[${count}]`;
const CELL_FRAME = /Cell In\[(\d+)\]:(\d+):(\d+)/;

// --- synchronous output -----------------------------------------------------

const sleepCell = new Int32Array(new SharedArrayBuffer(4));

/** Writes all of buf to fd, waiting while a non-blocking descriptor is full. */
function writeAll(fd, buf) {
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(fd, buf, off, buf.length - off);
    } catch (e) {
      if (e.code === 'EAGAIN') {
        Atomics.wait(sleepCell, 0, 0, 1); // 1 ms, then retry
        continue;
      }
      if (e.code === 'EINTR') continue;
      throw e;
    }
  }
}

/**
 * A stdout/stderr stream that writes synchronously to its descriptor, so
 * output is never queued in the process (and its order with frames on fd 3
 * is the order of the calls).
 */
class SyncOutput extends Writable {
  constructor(fd) {
    super({ decodeStrings: true });
    this.fd = fd;
    this.isTTY = false;
    this._type = 'pipe';
    this._isStdio = true;
  }

  _write(chunk, _encoding, callback) {
    try {
      writeAll(this.fd, chunk);
    } catch (e) {
      if (e.code !== 'EPIPE' && e.code !== 'EBADF') return callback(e);
    }
    callback();
  }

  getColorDepth() { return 1; }
  hasColors() { return false; }
}

const stdout = new SyncOutput(1);
const stderr = new SyncOutput(2);
for (const [name, stream] of [['stdout', stdout], ['stderr', stderr]]) {
  const d = ObjectGetOwnPropertyDescriptor(proc, name);
  ObjectDefineProperty(proc, name, { configurable: true, enumerable: d ? d.enumerable : true, get: () => stream });
}

function writeErr(text) {
  try {
    writeAll(2, BufferFrom(text, 'utf8'));
  } catch (_) { /* stderr gone */ }
}

// --- frames -----------------------------------------------------------------

/** Writes one message on the control socket; a broken socket ends the runtime. */
function send(msg) {
  let body = BufferFrom(jsonStringify(msg), 'utf8');
  if (body.length > MAX_FRAME) body = BufferFrom(jsonStringify(shrink(msg, body.length)), 'utf8');
  const frame = BufferAlloc(4 + body.length);
  frame.writeUInt32BE(body.length, 0);
  body.copy(frame, 4);
  try {
    writeAll(CTL_FD, frame);
  } catch (e) {
    writeErr(`airlock runtime: cannot write to the control socket: ${e.message}\n`);
    realExit(2);
  }
}

/** A stand-in for a message too large for one frame. */
function shrink(msg, size) {
  const note = `[output of ${size} bytes is larger than the ${MAX_FRAME >> 20} MiB frame limit]`;
  if (msg.type === 'display' || msg.type === 'result') return { ...msg, data: { 'text/plain': note }, metadata: {} };
  if (msg.type === 'error') {
    return { ...msg, value: String(msg.value).slice(0, 65536), traceback: [note] };
  }
  return msg;
}

function fatal(why) {
  writeErr(`airlock runtime: fatal protocol error: ${why}\n`);
  realExit(2);
}

// Incoming frames: accumulated chunks, decoded as soon as complete.
let inChunks = [];
let inLength = 0;

function onControlData(chunk) {
  inChunks.push(chunk);
  inLength += chunk.length;
  for (;;) {
    if (inLength < 4) return;
    if (inChunks[0].length < 4) inChunks = [BufferConcat(inChunks, inLength)];
    const n = inChunks[0].readUInt32BE(0);
    if (n === 0 || n > MAX_FRAME) fatal(`frame length ${n}`);
    if (inLength < 4 + n) return; // join the chunks only once the frame is complete
    const buf = inChunks.length === 1 ? inChunks[0] : BufferConcat(inChunks, inLength);
    const body = buf.subarray(4, 4 + n);
    const rest = buf.subarray(4 + n);
    inChunks = rest.length ? [rest] : [];
    inLength = rest.length;
    let msg;
    try {
      msg = jsonParse(utf8Decoder.decode(body));
    } catch (e) {
      fatal(`bad JSON: ${e.message}`);
    }
    dispatch(msg);
  }
}

function onControlEnd() {
  if (inLength > 0) fatal('truncated frame at end of input');
  realExit(0); // the server closed the socket
}

/** Validates a message from the server and queues (or acts on) it. */
function dispatch(msg) {
  if (msg === null || typeof msg !== 'object' || ArrayIsArray(msg) || typeof msg.type !== 'string') {
    fatal('a message must be an object with a string "type"');
  }
  switch (msg.type) {
    case 'shutdown':
      realExit(0);
      break;
    case 'execute':
      // No code is an empty cell, as '' is: it does nothing.
      if (msg.code === undefined) msg.code = '';
      if (typeof msg.id !== 'string' || typeof msg.code !== 'string') fatal('execute needs a string "id" and a string "code"');
      break;
    case 'run': {
      const { id, argv, env, cwd } = msg;
      if (typeof id !== 'string') fatal('run needs a string "id"');
      if (!ArrayIsArray(argv) || argv.length < 2 || argv.some((a) => typeof a !== 'string' || a.includes('\0'))) {
        fatal('run: "argv" must be the interpreter, the program and its arguments, as strings');
      }
      if (env === null || typeof env !== 'object' || ArrayIsArray(env) || ObjectValues(env).some((v) => typeof v !== 'string')) {
        fatal('run: "env" must map strings to strings');
      }
      if (cwd !== undefined && cwd !== null && typeof cwd !== 'string') fatal('run: "cwd" must be a string');
      break;
    }
    case 'configure': {
      const { env, cwd, defaults } = msg;
      for (const [key, m] of [['env', env], ['defaults', defaults]]) {
        if (m === undefined || m === null) continue;
        if (typeof m !== 'object' || ArrayIsArray(m)) fatal(`configure: "${key}" must map strings to strings`);
        for (const v of ObjectValues(m)) if (typeof v !== 'string') fatal(`configure: "${key}" must map strings to strings`);
      }
      if (cwd !== undefined && cwd !== null && typeof cwd !== 'string') fatal('configure: "cwd" must be a string');
      break;
    }
    default:
      fatal(`unknown message type ${jsonStringify(msg.type.slice(0, 32))}`);
  }
  queue.push(msg);
  if (!busy) pump();
}

const queue = [];
let busy = false;

/** Handles queued messages one at a time (an execution may await). */
async function pump() {
  busy = true;
  try {
    while (queue.length) {
      const msg = queue.shift();
      try {
        if (msg.type === 'configure') configure(msg);
        else if (msg.type === 'run') runProgram(msg);
        else await execute(msg.id, msg.code);
      } catch (e) { // a bug in the runtime: note it and go on
        writeErr(`airlock runtime: internal error: ${safeString(() => e.stack, '?')}\n`);
      }
    }
  } finally {
    busy = false;
  }
}

function configure(msg) {
  const errors = [];
  if (msg.env) {
    try {
      for (const k of ObjectKeys(proc.env)) delete proc.env[k];
      for (const [k, v] of ObjectEntries(msg.env)) proc.env[k] = v;
    } catch (e) {
      errors.push(`environment: ${e.message}`);
    }
  }
  if (msg.defaults) {
    try {
      for (const [k, v] of ObjectEntries(msg.defaults)) if (!hasOwn(proc.env, k)) proc.env[k] = v;
    } catch (e) {
      errors.push(`environment: ${e.message}`);
    }
  }
  if (msg.cwd) {
    try {
      proc.chdir(msg.cwd);
    } catch (e) {
      errors.push(`cannot change directory to ${jsonStringify(msg.cwd)}: ${e.code || e.message}`);
    }
  }
  const reply = { type: 'configured' };
  if (errors.length) reply.error = errors.join('; ');
  send(reply);
}

/**
 * Program mode: runs `node FILE ARGS` as a child on the runtime's stdout and
 * stderr (stdin empty), sends one done with its exit status (128+N for a
 * signal) and exits. A program run is the runtime's last act; nothing of the
 * session's globals reaches the program, which gets a fresh Node.
 */
function runProgram(msg) {
  const r = spawnSync(msg.argv[0], msg.argv.slice(1), {
    stdio: ['ignore', 1, 2], env: msg.env, cwd: msg.cwd || undefined, windowsHide: true,
  });
  let code;
  if (r.error) {
    writeErr(`airlock: cannot start ${msg.argv[0]}: ${r.error.message}\n`);
    code = 127;
  } else if (r.status !== null) {
    code = r.status;
  } else {
    code = 128 + (osConstants.signals[r.signal] || 0);
  }
  send({ type: 'done', id: msg.id, status: 'exited', execution_count: 1, exit_code: code });
  for (const fd of [1, 2]) {
    try { fs.closeSync(fd); } catch (_) { /* already closed */ }
  }
  realExit(code);
}

// --- the user's globals -------------------------------------------------------

let requireCwd = null;
let requireFn = null;

/** A require() resolving relative to the current directory (which may change). */
function cwdRequire() {
  let cwd;
  try {
    cwd = proc.cwd();
  } catch (_) {
    cwd = '/';
  }
  if (cwd !== requireCwd) {
    requireFn = Module.createRequire(path.join(cwd, '[eval]'));
    requireCwd = cwd;
  }
  return requireFn;
}

const startCwd = (() => { try { return proc.cwd(); } catch (_) { return '/'; } })();
const userModule = new Module('[eval]', null);
userModule.filename = path.join(startCwd, '[eval]');
userModule.paths = Module._nodeModulePaths(startCwd);
userModule.loaded = true;

function userRequire(id) {
  return cwdRequire()(id);
}
userRequire.resolve = function resolve(request, options) {
  return cwdRequire().resolve(request, options);
};
userRequire.resolve.paths = function paths(request) {
  return cwdRequire().resolve.paths(request);
};
userRequire.cache = Module._cache;
userRequire.main = userModule;
userModule.require = userRequire;

/** import(spec) for cells: relative specifiers resolve from the current directory. */
function userImport(specifier) {
  let target = specifier;
  if (typeof specifier === 'string' && !specifier.startsWith('node:') && !/^[a-z][a-z0-9+.-]*:/i.test(specifier)) {
    try {
      if (/^\.{0,2}\//.test(specifier)) {
        target = url.pathToFileURL(path.resolve(proc.cwd(), specifier)).href;
      } else {
        const resolved = cwdRequire().resolve(specifier); // a builtin resolves to its name
        if (path.isAbsolute(resolved)) target = url.pathToFileURL(resolved).href;
      }
    } catch (_) { /* let import() report it */ }
  }
  return import(target);
}

/** What `import x from 'm'` binds for a require()d module. */
function interopDefault(m) {
  return m !== null && typeof m === 'object' && m.__esModule && 'default' in m ? m.default : m;
}

function defineGlobal(name, value) {
  ObjectDefineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
}

// --- display ---------------------------------------------------------------------

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
  const cur = current;
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

// --- tokenizer ------------------------------------------------------------------
//
// Just enough of JavaScript's lexical grammar to find the top-level
// statements of a cell: comments, strings, template literals (with nested
// substitutions), regular expression literals (told from division by the
// previous token), numbers, names and punctuators. Each token records
// whether a line break precedes it (for automatic semicolon insertion).
// Returns null when the source cannot be tokenized (an unterminated string,
// comment, template or regex); the cell is then compiled as written.

const PUNCTUATORS = [
  '>>>=', '...', '===', '!==', '**=', '<<=', '>>=', '>>>', '&&=', '||=', '??=',
  '=>', '==', '!=', '<=', '>=', '&&', '||', '??', '?.', '++', '--', '+=', '-=', '*=', '/=', '%=',
  '&=', '|=', '^=', '**', '<<', '>>',
];
/** Names after which an expression (so possibly a regex) starts. */
const BEFORE_EXPRESSION = new Set(['return', 'typeof', 'instanceof', 'in', 'of', 'new', 'delete', 'void', 'throw',
  'case', 'do', 'else', 'yield', 'await', 'extends']);
/** Keywords that cannot end an expression: a line break after them never ends a statement. */
const NOT_ENDING = new Set(['if', 'else', 'do', 'for', 'while', 'with', 'switch', 'case', 'default', 'try', 'catch',
  'finally', 'function', 'class', 'var', 'let', 'const', 'new', 'delete', 'typeof', 'void', 'in', 'instanceof',
  'throw', 'extends', 'import', 'export', 'await', 'yield', 'return']);
const NUMBER = /(?:0[xXoObB][0-9a-fA-F_]+n?|(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][+-]?\d[\d_]*)?n?)/y;

const isIdStart = (c) => (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 36 || c === 95 || c === 92 || c > 127;
const isIdPart = (c) => isIdStart(c) || (c >= 48 && c <= 57);
const isLineBreak = (c) => c === 10 || c === 13 || c === 0x2028 || c === 0x2029;

function tokenize(src) {
  const toks = [];
  const braces = []; // '{' or '${' for every open brace
  const n = src.length;
  let i = 0;
  let nl = false;

  const regexAllowed = () => {
    const p = toks[toks.length - 1];
    if (!p) return true;
    switch (p.type) {
      case 'punct': return p.value !== ')' && p.value !== ']' && p.value !== '++' && p.value !== '--';
      case 'name': return BEFORE_EXPRESSION.has(p.value);
      case 'template': return p.opens;
      default: return false;
    }
  };
  // Scans template characters from i; returns false if unterminated.
  const scanTemplate = (tok) => {
    while (i < n) {
      const c = src.charCodeAt(i);
      if (c === 92) { i += 2; continue; }
      if (c === 96) { i++; return true; }
      if (c === 36 && src.charCodeAt(i + 1) === 123) {
        i += 2;
        tok.opens = true;
        braces.push('${');
        return true;
      }
      i++;
    }
    return false;
  };

  if (src.startsWith('#!')) {
    while (i < n && !isLineBreak(src.charCodeAt(i))) i++;
  }
  while (i < n) {
    const c = src.charCodeAt(i);
    if (isLineBreak(c)) { nl = true; i++; continue; }
    if (c === 32 || c === 9 || c === 11 || c === 12 || c === 0xa0 || c === 0xfeff || (c > 127 && /\s/.test(src[i]))) { i++; continue; }
    if (c === 47 && src.charCodeAt(i + 1) === 47) {
      while (i < n && !isLineBreak(src.charCodeAt(i))) i++;
      continue;
    }
    if (c === 47 && src.charCodeAt(i + 1) === 42) {
      const e = src.indexOf('*/', i + 2);
      if (e < 0) return null;
      if (/[\n\r\u2028\u2029]/.test(src.slice(i, e))) nl = true;
      i = e + 2;
      continue;
    }
    const start = i;
    const tok = { type: 'punct', value: '', start, end: 0, nl, opens: false, closes: false };
    if (isIdStart(c)) {
      while (i < n && isIdPart(src.charCodeAt(i))) i += src.charCodeAt(i) === 92 ? 2 : 1;
      tok.type = 'name';
    } else if (c === 35 && i + 1 < n && isIdStart(src.charCodeAt(i + 1))) {
      i++;
      while (i < n && isIdPart(src.charCodeAt(i))) i++;
      tok.type = 'private';
    } else if ((c >= 48 && c <= 57) || (c === 46 && src.charCodeAt(i + 1) >= 48 && src.charCodeAt(i + 1) <= 57)) {
      NUMBER.lastIndex = i;
      i = NUMBER.test(src) ? NUMBER.lastIndex : i + 1;
      tok.type = 'num';
    } else if (c === 34 || c === 39) {
      i++;
      for (;;) {
        if (i >= n) return null;
        const d = src.charCodeAt(i);
        if (d === 92) { i += 2; continue; }
        if (d === c) { i++; break; }
        if (d === 10 || d === 13) return null;
        i++;
      }
      tok.type = 'string';
    } else if (c === 96) {
      i++;
      tok.type = 'template';
      if (!scanTemplate(tok)) return null;
    } else if (c === 125 && braces[braces.length - 1] === '${') {
      braces.pop();
      i++;
      tok.type = 'template';
      tok.closes = true;
      if (!scanTemplate(tok)) return null;
    } else if (c === 47 && regexAllowed()) {
      i++;
      let inClass = false;
      for (;;) {
        if (i >= n) return null;
        const d = src.charCodeAt(i);
        if (isLineBreak(d)) return null;
        if (d === 92) { i += 2; continue; }
        if (d === 91) inClass = true;
        else if (d === 93) inClass = false;
        else if (d === 47 && !inClass) { i++; break; }
        i++;
      }
      while (i < n && isIdPart(src.charCodeAt(i))) i++;
      tok.type = 'regex';
    } else {
      let p = src[i];
      for (const q of PUNCTUATORS) {
        if (src.startsWith(q, i)) { p = q; break; }
      }
      if (p === '?.' && src.charCodeAt(i + 2) >= 48 && src.charCodeAt(i + 2) <= 57) p = '?';
      i += p.length;
      if (p === '{') braces.push('{');
      else if (p === '}') braces.pop();
      if (p === '{' || p === '(' || p === '[') tok.opens = true;
      else if (p === '}' || p === ')' || p === ']') tok.closes = true;
    }
    tok.end = i;
    tok.value = src.slice(start, i);
    toks.push(tok);
    nl = false;
  }
  return toks;
}

// --- top-level statements ------------------------------------------------------
//
// splitStatements cuts the token list into top-level statements, following
// brackets, automatic semicolon insertion at line breaks, statement headers
// (`if (...)` and friends, after which a line break does not end anything),
// block bodies (`} else`, `} catch`, `do {} while ()`), and function and
// class declarations (which end with their body). Each statement gets a kind:
//   'decl' (var/let/const), 'function', 'class', 'import', 'export',
//   'expr' (an expression statement) or 'other' (if, for, blocks, ...).

const HEADER_KEYWORDS = new Set(['if', 'for', 'while', 'with', 'switch', 'catch']);
const BLOCK_AFTER = new Set(['else', 'do', 'try', 'finally']);
const NEVER_AFTER_BREAK = new Set(['else', 'catch', 'finally']);
const STATEMENT_KEYWORDS = new Set(['if', 'for', 'while', 'do', 'switch', 'try', 'with', 'return', 'throw', 'break',
  'continue', 'debugger', 'var', 'let', 'const', 'function', 'class', 'import', 'export']);
const CONTINUES = new Set(['(', '[', '.', '?.', ',', '?', ':', '=', '==', '===', '!=', '!==', '<', '>', '<=', '>=', '+', '-',
  '*', '/', '%', '**', '&', '|', '^', '<<', '>>', '>>>', '&&', '||', '??', '=>', '+=', '-=', '*=', '/=', '%=', '**=',
  '<<=', '>>=', '>>>=', '&=', '|=', '^=', '&&=', '||=', '??=', ';', ')', ']', '}']);

const isP = (t, v) => t !== undefined && t.type === 'punct' && t.value === v;
const isName = (t, v) => t !== undefined && t.type === 'name' && (v === undefined || t.value === v);

/** Whether toks[k] can end an expression (a line break after it may end the statement). */
function endsExpression(toks, k, headerClose) {
  const t = toks[k];
  switch (t.type) {
    case 'name': return !NOT_ENDING.has(t.value) || isP(toks[k - 1], '.') || isP(toks[k - 1], '?.'); // obj.default
    case 'template': return !t.opens;
    case 'punct':
      if (t.value === ')') return !headerClose;
      return t.value === ']' || t.value === '}' || t.value === '++' || t.value === '--';
    default: return true;
  }
}

function continuesExpression(t) {
  if (t.type === 'punct') return CONTINUES.has(t.value);
  if (t.type === 'name') return t.value === 'in' || t.value === 'instanceof' || NEVER_AFTER_BREAK.has(t.value);
  if (t.type === 'template') return !t.closes; // a tagged template
  return false;
}

/** Index of the token that closes the bracket opened at toks[i]. */
function matchingClose(toks, i) {
  let depth = 0;
  for (let j = i; j < toks.length; j++) {
    if (toks[j].opens && !toks[j].closes) depth++;
    else if (toks[j].closes && !toks[j].opens) {
      depth--;
      if (depth === 0) return j;
    }
  }
  return toks.length - 1;
}

/** The kind of the statement starting at toks[i]. */
function statementKind(toks, i) {
  const t = toks[i];
  if (t.type === 'punct') {
    if (t.value === '{' || t.value === ';') return 'other';
    return 'expr';
  }
  if (t.type !== 'name') return 'expr';
  const next = toks[i + 1];
  switch (t.value) {
    case 'let':
      return next && (next.type === 'name' || isP(next, '[') || isP(next, '{')) ? 'decl' : 'expr';
    case 'var': case 'const':
      return 'decl';
    case 'function':
      return 'function';
    case 'async':
      return isName(next, 'function') && !next.nl ? 'function' : 'expr';
    case 'class':
      return 'class';
    case 'import':
      return next && (isP(next, '(') || isP(next, '.')) ? 'expr' : 'import';
    case 'export':
      return 'export';
  }
  if (STATEMENT_KEYWORDS.has(t.value)) return 'other';
  if (isP(next, ':') && !isP(toks[i + 2], ':')) return 'other'; // a label
  return 'expr';
}

/** Index after the end of a function or class declaration starting at i (its body's '}'). */
function declarationEnd(toks, i) {
  let depth = 0;
  for (let j = i; j < toks.length; j++) {
    const t = toks[j];
    if (depth === 0 && isP(t, '{')) return matchingClose(toks, j) + 1;
    if (t.opens && !t.closes) depth++;
    else if (t.closes && !t.opens) depth--;
  }
  return toks.length;
}

/** Index after the end of the statement starting at i. */
function statementEnd(toks, i, kind) {
  if (kind === 'function' || kind === 'class') return declarationEnd(toks, i);
  if (kind === 'export') {
    let j = i + 1;
    if (isName(toks[j], 'default')) j++;
    const k = toks[j] && statementKind(toks, j);
    if (k === 'function' || k === 'class') return declarationEnd(toks, j);
  }
  const first = toks[i];
  if (isP(first, ';')) return i + 1;
  const isDo = isName(first, 'do');
  const stack = []; // per open bracket: 'header' | 'block' | ''
  let headerClose = false; // the previous token closed a statement header
  let sawDoWhile = false;
  for (let j = i; j < toks.length; j++) {
    const t = toks[j];
    if (j > i && stack.length === 0 && t.nl) {
      if (!(isDo && !sawDoWhile) && endsExpression(toks, j - 1, headerClose) && !continuesExpression(t)) return j;
    }
    const wasHeaderClose = headerClose;
    headerClose = false;
    if (t.opens && !t.closes) {
      let role = '';
      if (stack.length === 0) {
        const prev = toks[j - 1];
        if (t.value === '(' && j > i && (HEADER_KEYWORDS.has(prev.value) && prev.type === 'name' ||
            (isName(prev, 'await') && isName(toks[j - 2], 'for')))) role = 'header';
        else if (t.value === '{' && (j === i || wasHeaderClose || (prev.type === 'name' && (BLOCK_AFTER.has(prev.value) || prev.value === 'catch')))) role = 'block';
        if (role === 'header' && isDo && isName(prev, 'while')) sawDoWhile = true;
      }
      stack.push(role);
    } else if (t.closes && !t.opens) {
      const role = stack.pop();
      if (stack.length === 0) {
        if (role === 'header') {
          if (isDo && sawDoWhile) return isP(toks[j + 1], ';') ? j + 2 : j + 1;
          headerClose = true;
        } else if (role === 'block') {
          const next = toks[j + 1];
          if (next && next.type === 'name' && (NEVER_AFTER_BREAK.has(next.value) || (isDo && next.value === 'while'))) continue;
          return j + 1;
        }
      }
    } else if (stack.length === 0 && isP(t, ';')) {
      const next = toks[j + 1];
      if (next && next.type === 'name' && (next.value === 'else' || (isDo && next.value === 'while' && !sawDoWhile))) continue;
      return j + 1;
    }
  }
  return toks.length;
}

function splitStatements(toks) {
  const stmts = [];
  let i = 0;
  while (i < toks.length) {
    const kind = statementKind(toks, i);
    const end = Math.max(statementEnd(toks, i, kind), i + 1);
    stmts.push({ start: i, end, kind });
    i = end;
  }
  return stmts;
}

// --- declarations ---------------------------------------------------------------

/** Skips a default/initializer expression from i to the ',' or closer at depth 0. */
function skipExpression(toks, i, end) {
  let depth = 0;
  for (; i < end; i++) {
    const t = toks[i];
    if (depth === 0 && (isP(t, ',') || (t.closes && !t.opens))) return i;
    if (t.opens && !t.closes) depth++;
    else if (t.closes && !t.opens) depth--;
  }
  return i;
}

/**
 * Parses a binding target (name, [pattern] or {pattern}) at i, adding the
 * bound names to names. Returns the index after it.
 */
function parseBinding(toks, i, end, names) {
  const t = toks[i];
  if (!t) throw new SyntaxError('binding');
  if (t.type === 'name') {
    names.push(t.value);
    return i + 1;
  }
  if (isP(t, '[')) {
    i++;
    while (i < end && !isP(toks[i], ']')) {
      if (isP(toks[i], ',')) { i++; continue; }
      if (isP(toks[i], '...')) i++;
      i = parseBinding(toks, i, end, names);
      if (isP(toks[i], '=')) i = skipExpression(toks, i + 1, end);
      if (isP(toks[i], ',')) i++;
    }
    return i + 1;
  }
  if (isP(t, '{')) {
    i++;
    while (i < end && !isP(toks[i], '}')) {
      if (isP(toks[i], '...')) {
        i = parseBinding(toks, i + 1, end, names);
      } else {
        const key = toks[i];
        let afterKey;
        if (isP(key, '[')) afterKey = matchingClose(toks, i) + 1;
        else afterKey = i + 1;
        if (isP(toks[afterKey], ':')) {
          i = parseBinding(toks, afterKey + 1, end, names);
        } else {
          if (key.type !== 'name') throw new SyntaxError('binding');
          names.push(key.value);
          i = afterKey;
        }
        if (isP(toks[i], '=')) i = skipExpression(toks, i + 1, end);
      }
      if (isP(toks[i], ',')) i++;
      else if (!isP(toks[i], '}')) throw new SyntaxError('binding');
    }
    return i + 1;
  }
  throw new SyntaxError('binding');
}

/**
 * The declarators of `var/let/const ...` between kw (the keyword) and end:
 * [{start, bindingEnd, hasInit, names}].
 */
function parseDeclarators(toks, kw, end) {
  const out = [];
  let i = kw + 1;
  while (i < end) {
    const names = [];
    const start = i;
    const bindingEnd = parseBinding(toks, i, end, names);
    let hasInit = false;
    i = bindingEnd;
    if (isP(toks[i], '=')) {
      hasInit = true;
      i = skipExpression(toks, i + 1, end);
    }
    out.push({ start, bindingEnd, hasInit, names });
    if (isP(toks[i], ',')) i++;
    else if (i < end) throw new SyntaxError('declarators');
  }
  return out;
}

/** Parses a static import declaration; returns {source, bindings: [{local, imported}]}. */
function parseImport(toks, i, end) {
  const bindings = [];
  let j = i + 1;
  if (toks[j] && toks[j].type === 'string') return { source: toks[j].value, bindings };
  if (isName(toks[j]) && !isName(toks[j], 'from') || (isName(toks[j], 'from') && isName(toks[j + 1], 'from'))) {
    bindings.push({ local: toks[j].value, imported: 'default' });
    j++;
    if (isP(toks[j], ',')) j++;
  }
  if (isP(toks[j], '*')) {
    if (!isName(toks[j + 1], 'as') || !isName(toks[j + 2])) throw new SyntaxError('import');
    bindings.push({ local: toks[j + 2].value, imported: '*' });
    j += 3;
  } else if (isP(toks[j], '{')) {
    j++;
    while (j < end && !isP(toks[j], '}')) {
      const imported = toks[j];
      let local = imported;
      j++;
      if (isName(toks[j], 'as')) {
        local = toks[j + 1];
        j += 2;
      }
      if (!local || local.type !== 'name') throw new SyntaxError('import');
      bindings.push({ local: local.value, imported: imported.type === 'string' ? imported.value : jsonStringify(imported.value) });
      if (isP(toks[j], ',')) j++;
    }
    j++;
  }
  if (!isName(toks[j], 'from') || !toks[j + 1] || toks[j + 1].type !== 'string') throw new SyntaxError('import');
  return { source: toks[j + 1].value, bindings };
}

// --- the cell transform ------------------------------------------------------------

/**
 * Rewrites a cell for a persistent namespace (see the header comment).
 * mode 'sync': a script whose completion value is the cell's value.
 * mode 'async': `var <hoisted>; (async () => { ... return (last expression) })()`
 * on an extra first line (compile it with lineOffset -1).
 * Line numbers of the cell are kept. Returns null when the cell cannot be
 * analysed (it is then compiled as written).
 */
function transformCell(src, toks, mode) {
  const isAsync = mode === 'async';
  let stmts;
  try {
    stmts = splitStatements(toks);
  } catch (_) {
    return null;
  }
  const edits = []; // {start, end, text}: replace src[start, end) by text
  const hoisted = new Set();
  const exported = []; // function names (async mode)
  const insert = (pos, text) => edits.push({ start: pos, end: pos, text });
  // Replaces a whole range, keeping its line breaks so later lines keep their numbers.
  const replaceKeepingLines = (start, end, text) => {
    const breaks = src.slice(start, end).match(/\r\n|[\n\r\u2028\u2029]/g);
    edits.push({ start, end, text: text + (breaks ? '\n'.repeat(breaks.length) : '') });
  };

  for (const [k, tok] of toks.entries()) {
    // import(x) anywhere: resolve from the current directory.
    if (isName(tok, 'import') && isP(toks[k + 1], '(') && !isP(toks[k - 1], '.')) {
      edits.push({ start: tok.start, end: tok.end, text: '__airlock__.import' });
    }
  }

  let lastExpr = null;
  try {
    for (const st of stmts) {
      let { start, kind } = st;
      let end = st.end;
      lastExpr = null;
      const semicolon = isP(toks[end - 1], ';');
      const last = semicolon ? end - 2 : end - 1; // last token before any ';'
      if (kind === 'export') {
        // Drop `export` / `export default`; `export {...}` and `export * from` go.
        let j = start + 1;
        if (isName(toks[j], 'default')) j++;
        if (isP(toks[j], '{') || isP(toks[j], '*')) {
          replaceKeepingLines(toks[start].start, toks[end - 1].end, ';');
          continue;
        }
        edits.push({ start: toks[start].start, end: toks[j].start, text: '' });
        start = j;
        kind = statementKind(toks, j);
        if (kind === 'function' || kind === 'class') end = declarationEnd(toks, j);
      }
      const first = toks[start];
      switch (kind) {
        case 'decl': {
          const decls = parseDeclarators(toks, start, semicolon ? end - 1 : end);
          const isLet = first.value === 'let';
          if (!isAsync) {
            if (first.value !== 'var') edits.push({ start: first.start, end: first.end, text: 'var' });
            for (const d of decls) if (isLet && !d.hasInit) insert(toks[d.bindingEnd - 1].end, ' = void 0');
          } else {
            for (const d of decls) {
              d.names.forEach((x) => hoisted.add(x));
              if (isLet && !d.hasInit) insert(toks[d.bindingEnd - 1].end, ' = void 0');
            }
            edits.push({ start: first.start, end: first.end, text: 'void (' });
            insert(toks[last].end, ');');
          }
          break;
        }
        case 'class': {
          const name = toks[start + 1];
          if (!isName(name) || name.value === 'extends') break; // anonymous: leave to the compiler
          const close = toks[end - 1];
          if (isAsync) {
            hoisted.add(name.value);
            insert(first.start, `${name.value} = `);
          } else {
            insert(first.start, `var ${name.value} = `);
          }
          insert(close.end, ';');
          break;
        }
        case 'function': {
          if (!isAsync) break;
          let j = start + 1;
          if (isName(first, 'async')) j++;
          if (isP(toks[j], '*')) j++;
          if (isName(toks[j])) {
            hoisted.add(toks[j].value);
            exported.push(toks[j].value);
          }
          break;
        }
        case 'import': {
          const { source, bindings } = parseImport(toks, start, end);
          const mod = `require(${source})`;
          const parts = [];
          const named = [];
          for (const b of bindings) {
            if (isAsync) hoisted.add(b.local);
            if (b.imported === 'default') parts.push(`${b.local} = __airlock__.interopDefault(${mod})`);
            else if (b.imported === '*') parts.push(`${b.local} = ${mod}`);
            else named.push(`${b.imported}: ${b.local}`);
          }
          if (named.length) parts.push(`{${named.join(', ')}} = ${mod}`);
          let text;
          if (!parts.length) text = `${mod};`;
          else if (isAsync) text = `void (${parts.join(', ')});`;
          else text = `var ${parts.join(', ')};`;
          replaceKeepingLines(first.start, toks[end - 1].end, text);
          break;
        }
        case 'expr':
          lastExpr = { first: start, last };
          break;
        default:
          break;
      }
    }
  } catch (_) {
    return null;
  }

  if (isAsync && lastExpr) {
    insert(toks[lastExpr.first].start, 'return (');
    insert(toks[lastExpr.last].end, '\n)');
  }
  edits.sort((a, b) => a.start - b.start || a.end - b.end);
  let out = '';
  let pos = 0;
  for (const e of edits) {
    if (e.start < pos) return null; // overlapping edits: give up
    out += src.slice(pos, e.start) + e.text;
    pos = e.end;
  }
  out += src.slice(pos);
  if (isAsync) {
    const names = [...hoisted];
    const prelude = (names.length ? `var ${names.join(', ')}; ` : '') + '(async () => { ' +
      exported.map((f) => `this.${f} = ${f}; `).join('');
    out = `${prelude}\n${out}\n})()`;
  }
  return { code: out, lastIsExpr: lastExpr !== null };
}

// --- compiling a cell --------------------------------------------------------------

const AWAIT_ONLY = /await is only valid|Unexpected reserved word/;

/** Index of the matching bracket for every bracket token (template ${ } included). */
function bracketPairs(toks) {
  const match = new Array(toks.length).fill(-1);
  const open = [];
  toks.forEach((t, i) => {
    if (t.closes && open.length) {
      const j = open.pop();
      match[i] = j;
      match[j] = i;
    }
    if (t.opens) open.push(i);
  });
  return match;
}

/**
 * Whether the cell awaits outside any function body: it then runs as an
 * async body even if it would also compile as a script (where `await (x)`
 * is a call of a function named await).
 */
function hasTopLevelAwait(toks) {
  const match = bracketPairs(toks);
  const fnBody = []; // per open brace: whether it is a function body
  let depth = 0;
  for (let i = 0; i < toks.length; i++) {
    const t = toks[i];
    if (t.closes && fnBody.length && fnBody.pop()) depth--;
    if (t.opens) {
      let fn = false;
      const prev = toks[i - 1];
      if (isP(t, '{') && prev) {
        if (isP(prev, '=>')) fn = true;
        else if (isP(prev, ')') && match[i - 1] > 0) {
          const before = toks[match[i - 1] - 1]; // function f(...) {, method(...) {, [key](...) {
          fn = (before.type === 'name' && !HEADER_KEYWORDS.has(before.value)) || isP(before, ']') || isP(before, '*');
        }
      }
      fnBody.push(fn);
      if (fn) depth++;
    }
    if (depth === 0 && isName(t, 'await') && !isP(toks[i - 1], '.') && !isP(toks[i - 1], '?.')) return true;
  }
  return false;
}

function compileScript(code, filename, lineOffset) {
  return new vm.Script(code, { filename, lineOffset: lineOffset || 0 });
}

/** Compiles the transform of a cell; null if the transform or the compiler gives up. */
function tryCompile(code, toks, mode, filename) {
  const t = transformCell(code, toks, mode);
  if (!t) return null;
  try {
    const script = compileScript(t.code, filename, mode === 'async' ? -1 : 0);
    return { script, lastIsExpr: t.lastIsExpr, async: mode === 'async' };
  } catch (_) {
    return null;
  }
}

/**
 * Compiles a cell. Returns {script, lastIsExpr, async}; throws the
 * SyntaxError to report (with the cell's own line numbers).
 */
function compileCell(code, count) {
  const filename = cellName(count);
  // A cell that is one object literal is an expression, as in the node REPL.
  if (/^\s*\{/.test(code) && /\}\s*$/.test(code)) {
    try {
      return { script: compileScript(`(${code}\n)`, filename), lastIsExpr: true, async: false };
    } catch (_) { /* a block after all */ }
  }
  const toks = tokenize(code);
  if (toks) {
    let compiled;
    if (hasTopLevelAwait(toks)) {
      compiled = tryCompile(code, toks, 'async', filename) || tryCompile(code, toks, 'sync', filename);
    } else {
      compiled = tryCompile(code, toks, 'sync', filename) ||
        (toks.some((t) => isName(t, 'await')) ? tryCompile(code, toks, 'async', filename) : null);
    }
    if (compiled) return compiled;
  }
  // The cell as written: a valid cell the transform could not handle runs
  // without it; otherwise this throws the SyntaxError with the cell's lines.
  try {
    return { script: compileScript(code, filename), lastIsExpr: true, async: false };
  } catch (e) {
    if (!AWAIT_ONLY.test(e.message)) throw e;
  }
  // Top-level await the transform could not handle: run the cell as a plain
  // async body (no result, its declarations stay local), or report the
  // error it has there.
  return { script: compileScript(`(async () => {\n${code}\n})()`, filename, -1), lastIsExpr: false, async: true };
}

// --- errors ----------------------------------------------------------------------

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
 * Frames of the runtime: its file, node:vm, and lines of a cell that are not
 * the user's (0 and past the end: the async wrapper's).
 */
function isRuntimeFrame(line) {
  if (line.includes(RUNTIME_FILE) || /\bnode:vm[:)]/.test(line)) return true;
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

function safeString(f, fallback) {
  try {
    const v = f();
    return typeof v === 'string' ? v : fallback;
  } catch (_) {
    return fallback;
  }
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

// --- executions ----------------------------------------------------------------------

let executionCount = 0;
/**
 * The running execution: {id, count, async (its synchronous part is over),
 * awaiting (its value), failure (what ended the wait), abort (ends it)}.
 */
let current = null;

const kExitCode = Symbol('airlock.exitCode');
const INTERRUPT = Symbol('airlock.interrupt');

/**
 * process.exit for user code: ends the execution instead of the runtime.
 * The SystemExit error carries the exit code: 0 for a clean exit, else the
 * status a process would have (n & 0xff, or 1 when that is 0 or n is not an
 * integer).
 */
function exit(code) {
  if (code === undefined) code = proc.exitCode;
  let n = code === undefined || code === null ? 0 : Number(code);
  if (n !== 0) n = (Number.isInteger(n) && n & 0xff) || 1;
  const err = new Error(`process.exit(${code === undefined ? '' : safeString(() => String(code), '?')})`);
  err.name = 'SystemExit';
  ObjectDefineProperty(err, kExitCode, { value: n, enumerable: false });
  Error.captureStackTrace(err, exit);
  throw err;
}

const exitCodeOf = (e) => (e !== null && typeof e === 'object' && hasOwn(e, kExitCode) ? e[kExitCode] : undefined);

/** Ends the running execution's wait with why (an error, exit or INTERRUPT). */
function abortCurrent(why) {
  const cur = current;
  if (!cur || !cur.async || cur.failure !== undefined) return false;
  cur.failure = why;
  cur.abort(why);
  return true;
}

function onSigint() {
  abortCurrent(INTERRUPT); // while idle: nothing to do
}

/** uncaughtException and unhandledRejection: end a waiting execution, else report on stderr. */
function onUncaught(err) {
  if (abortCurrent(err)) return;
  if (exitCodeOf(err) !== undefined) {
    writeErr(`airlock: ${safeString(() => err.message, 'process.exit()')} ignored: no execution is running\n`);
    return;
  }
  const d = describeError(err, false);
  writeErr(`Uncaught ${d.traceback.join('\n')}\n`);
}

const tick = () => new HostPromise((resolve) => hostSetImmediate(resolve));

/**
 * Runs one cell; returns {kind: 'ok', value, hasValue} | {kind: 'error', err,
 * syntax} | {kind: 'exit', code, err} | {kind: 'interrupt', awaiting}.
 */
async function runCell(cur, code) {
  let compiled;
  try {
    compiled = compileCell(code, cur.count);
  } catch (err) {
    return { kind: 'error', err, syntax: true };
  }
  let value;
  try {
    value = compiled.script.runInThisContext({ breakOnSigint: true, displayErrors: false });
  } catch (err) {
    return outcomeOf(err, false);
  }
  const wantValue = compiled.lastIsExpr;
  // From here on the execution waits: SIGINT and errors thrown by callbacks end it.
  cur.async = true;
  const aborted = new HostPromise((_, reject) => { cur.abort = reject; });
  aborted.catch(() => {});
  try {
    if (isPromise(value) && (wantValue || compiled.async)) {
      cur.awaiting = true;
      value = await promiseRace([value, aborted]);
      cur.awaiting = false;
    }
    // One turn of the event loop: let what the cell started synchronously
    // report (unhandled rejections, process.nextTick callbacks).
    await promiseRace([tick(), aborted]);
  } catch (err) {
    return outcomeOf(err, cur.awaiting);
  }
  if (cur.failure !== undefined) return outcomeOf(cur.failure, false);
  return { kind: 'ok', value, hasValue: wantValue && value !== undefined };
}

function outcomeOf(err, awaiting) {
  if (err === INTERRUPT || (err !== null && typeof err === 'object' && safeString(() => err.code, '') === 'ERR_SCRIPT_EXECUTION_INTERRUPTED')) {
    return { kind: 'interrupt', awaiting };
  }
  const code = exitCodeOf(err);
  if (code !== undefined) return { kind: 'exit', code, err };
  return { kind: 'error', err, syntax: false };
}

async function execute(id, code) {
  const count = ++executionCount;
  const cur = { id, count, async: false, awaiting: false, failure: undefined, abort: null };
  current = cur;
  rememberCell(count, code);
  let outcome;
  try {
    outcome = await runCell(cur, code);
  } catch (err) {
    outcome = { kind: 'error', err, syntax: false };
  }
  const msgs = [];
  let status = 'ok';
  let exitCode = 0;
  try {
    switch (outcome.kind) {
      case 'ok':
        if (outcome.hasValue) {
          try {
            msgs.push({ type: 'result', id, data: formatValue(outcome.value), metadata: {}, execution_count: count });
          } catch (err) {
            msgs.push({ type: 'error', id, ...describeError(err, false) });
            status = 'error';
            exitCode = 1;
          }
        }
        break;
      case 'error':
        msgs.push({ type: 'error', id, ...describeError(outcome.err, outcome.syntax) });
        status = 'error';
        exitCode = 1;
        break;
      case 'exit':
        if (outcome.code !== 0) {
          msgs.push({ type: 'error', id, ...describeError(outcome.err, false) });
          status = 'error';
          exitCode = outcome.code;
        }
        break;
      case 'interrupt': {
        const tb = ['KeyboardInterrupt'];
        if (outcome.awaiting) tb.push('(interrupted while awaiting a promise; work it started may still be running)');
        msgs.push({ type: 'error', id, name: 'KeyboardInterrupt', value: '', traceback: tb });
        status = 'interrupted';
        exitCode = 1;
        break;
      }
    }
  } catch (err) {
    writeErr(`airlock runtime: internal error: ${safeString(() => err.message, '?')}\n`);
    msgs.length = 0;
    msgs.push({ type: 'error', id, name: 'InternalError', value: 'airlock runtime error', traceback: [] });
    status = 'error';
    exitCode = 1;
  }
  current = null;
  for (const m of msgs) send(m);
  send({ type: 'done', id, status, execution_count: count, exit_code: exitCode });
}

// --- start -----------------------------------------------------------------------

function main() {
  defineGlobal('require', userRequire);
  defineGlobal('module', userModule);
  defineGlobal('exports', userModule.exports);
  defineGlobal('__filename', '[eval]');
  defineGlobal('__dirname', '.');
  defineGlobal('display', display);
  ObjectDefineProperty(globalThis, '__airlock__', {
    value: Object.freeze({ import: userImport, interopDefault }),
    writable: false, configurable: false, enumerable: false,
  });
  proc.exit = exit;
  proc.on('SIGINT', onSigint);
  proc.on('uncaughtException', onUncaught);
  proc.on('unhandledRejection', onUncaught);

  let ctl;
  try {
    ctl = new net.Socket({ fd: CTL_FD, readable: true, writable: false });
  } catch (e) {
    writeErr(`airlock runtime: fd ${CTL_FD} is not a usable control socket: ${e.message}\n`);
    realExit(2);
  }
  ctl.on('data', onControlData);
  ctl.on('end', onControlEnd);
  ctl.on('error', (e) => {
    writeErr(`airlock runtime: control socket: ${e.message}\n`);
    realExit(2);
  });
  send({ type: 'hello', language: LANGUAGE, version: proc.versions.node, pid: proc.pid });
}

main();
