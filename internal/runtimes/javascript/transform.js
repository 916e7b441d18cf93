'use strict';
/*
 * Compiling a cell for a persistent namespace (the model is in runtime.js):
 * top-level let, const and class become var-like, static imports become
 * require() calls, export keywords go, import() resolves from the current
 * directory, and a cell that awaits at top level runs as an async body
 * with its declarations hoisted out as globals. compileCell returns the
 * vm.Script and whether its value is the cell's result.
 *
 * The cell is parsed by acorn (vendored in acorn/, as Node's REPL uses it
 * for the same job) and rewritten by edits to its source at the nodes'
 * offsets, so that every line keeps its number. A cell acorn cannot parse,
 * or whose rewrite V8 refuses, is compiled as written: valid code still
 * runs, only without these conveniences, and invalid code gets V8's own
 * SyntaxError.
 */

const vm = require('vm');
const acorn = require('./acorn/acorn');
const { cellName } = require('./current');
const { jsonStringify, ObjectKeys, ArrayIsArray } = require('./primordials');

const PARSE_OPTIONS = {
  ecmaVersion: 'latest',
  sourceType: 'script',
  allowHashBang: true,
  // Static imports and exports are rewritten (at the top level; V8 reports
  // the others), and await is allowed at the top level.
  allowImportExportEverywhere: true,
  allowAwaitOutsideFunction: true,
};
// A sloppy script may use await as a name (`var await`): parsed again so.
const PARSE_OPTIONS_NO_AWAIT = { ...PARSE_OPTIONS, allowAwaitOutsideFunction: false };

/** The cell's syntax tree ({tree, await: its top-level await allowed}), or null. */
function parse(code) {
  try {
    return { tree: acorn.parse(code, PARSE_OPTIONS), await: true };
  } catch (_) { /* below */ }
  if (!code.includes('await')) return null;
  try {
    return { tree: acorn.parse(code, PARSE_OPTIONS_NO_AWAIT), await: false };
  } catch (_) {
    return null;
  }
}

const isFunction = (n) => n.type === 'FunctionDeclaration' || n.type === 'FunctionExpression' ||
  n.type === 'ArrowFunctionExpression';

/**
 * Calls visit(node) for every node under node (node included), in source
 * order; visit returning false skips a node's children.
 */
function walk(node, visit) {
  if (visit(node) === false) return;
  for (const key of ObjectKeys(node)) {
    const v = node[key];
    if (v === null || typeof v !== 'object') continue;
    if (ArrayIsArray(v)) {
      for (const c of v) if (c !== null && typeof c.type === 'string') walk(c, visit);
    } else if (typeof v.type === 'string') {
      walk(v, visit);
    }
  }
}

/**
 * Whether the cell awaits outside any function (await, for await): it then
 * runs as an async body (where `await (x)` is an await, not a call of a
 * function named await).
 */
function hasTopLevelAwait(tree) {
  let found = false;
  walk(tree, (n) => {
    if (found || isFunction(n)) return false;
    if (n.type === 'AwaitExpression' || (n.type === 'ForOfStatement' && n.await)) found = true;
    return !found;
  });
  return found;
}

/** The names a binding pattern binds. */
function boundNames(pattern, out) {
  switch (pattern.type) {
    case 'Identifier': out.push(pattern.name); break;
    case 'ObjectPattern':
      for (const p of pattern.properties) boundNames(p.type === 'RestElement' ? p.argument : p.value, out);
      break;
    case 'ArrayPattern': for (const e of pattern.elements) if (e) boundNames(e, out); break;
    case 'RestElement': boundNames(pattern.argument, out); break;
    case 'AssignmentPattern': boundNames(pattern.left, out); break;
    default: throw new SyntaxError(`binding ${pattern.type}`);
  }
  return out;
}

/** Where what `export` (or `export default`) exports starts. */
function exportEnd(src, st) {
  if (st.type === 'ExportNamedDeclaration') return st.declaration.start; // never parenthesized
  const toks = acorn.tokenizer(src.slice(st.start, st.declaration.end), PARSE_OPTIONS);
  toks.getToken(); // export
  toks.getToken(); // default
  return st.start + toks.getToken().start; // a parenthesis, maybe
}

/**
 * Rewrites a cell for a persistent namespace (see the header comment).
 * mode 'sync': a script whose completion value is the cell's value.
 * mode 'async': `var <hoisted>; (async () => { ... return (last expression) })()`
 * on an extra first line (compile it with lineOffset -1).
 * Line numbers of the cell are kept. Returns null when the cell cannot be
 * rewritten (it is then compiled as written).
 */
function transformCell(src, tree, mode) {
  const isAsync = mode === 'async';
  const edits = []; // {start, end, text}: replace src[start, end) by text
  const hoisted = new Set();
  const exported = []; // function names (async mode)
  const insert = (pos, text) => edits.push({ start: pos, end: pos, text });
  // Replaces a whole range, keeping its line breaks so later lines keep their numbers.
  const replaceKeepingLines = (start, end, text) => {
    const breaks = src.slice(start, end).match(/\r\n|[\n\r\u2028\u2029]/g);
    edits.push({ start, end, text: text + (breaks ? '\n'.repeat(breaks.length) : '') });
  };

  // import(x) anywhere: resolve from the current directory.
  if (src.includes('import')) {
    walk(tree, (n) => {
      if (n.type === 'ImportExpression') edits.push({ start: n.start, end: n.start + 6, text: '__airlock__.import' });
    });
  }

  let lastExpr = null;
  try {
    for (let st of tree.body) {
      lastExpr = null;
      if (st.type === 'ExportNamedDeclaration' || st.type === 'ExportDefaultDeclaration' || st.type === 'ExportAllDeclaration') {
        // Drop `export` / `export default`; `export {...}` and `export * from` go.
        if (!st.declaration) {
          replaceKeepingLines(st.start, st.end, ';');
          continue;
        }
        const start = exportEnd(src, st);
        edits.push({ start: st.start, end: start, text: '' });
        if (!/Declaration$/.test(st.declaration.type)) {
          st = { type: 'ExpressionStatement', start, end: st.end }; // export default (expression)
        } else {
          st = st.declaration;
        }
      }
      switch (st.type) {
        case 'VariableDeclaration': {
          const isLet = st.kind === 'let';
          if (st.kind !== 'var' && st.kind !== 'let' && st.kind !== 'const') return null; // using: left to V8
          for (const d of st.declarations) {
            if (isLet && !d.init) insert(d.id.end, ' = void 0');
            if (isAsync) boundNames(d.id, []).forEach((x) => hoisted.add(x));
          }
          if (!isAsync) {
            if (st.kind !== 'var') edits.push({ start: st.start, end: st.start + st.kind.length, text: 'var' });
            // `let u` ended by a line break: `= void 0` must not run on into the next line.
            if (isLet && !st.declarations[st.declarations.length - 1].init && src[st.end - 1] !== ';') insert(st.end, ';');
          } else {
            edits.push({ start: st.start, end: st.start + st.kind.length, text: 'void (' });
            insert(st.declarations[st.declarations.length - 1].end, ');');
          }
          break;
        }
        case 'ClassDeclaration': {
          if (!st.id) break; // anonymous (export default class {}): left to V8
          if (isAsync) {
            hoisted.add(st.id.name);
            insert(st.start, `${st.id.name} = `);
          } else {
            insert(st.start, `var ${st.id.name} = `);
          }
          insert(st.end, ';');
          break;
        }
        case 'FunctionDeclaration':
          if (isAsync && st.id) {
            hoisted.add(st.id.name);
            exported.push(st.id.name);
          }
          break;
        case 'ImportDeclaration': {
          const mod = `require(${src.slice(st.source.start, st.source.end)})`;
          const parts = [];
          const named = [];
          for (const s of st.specifiers) {
            const local = s.local.name;
            if (isAsync) hoisted.add(local);
            if (s.type === 'ImportDefaultSpecifier') parts.push(`${local} = __airlock__.interopDefault(${mod})`);
            else if (s.type === 'ImportNamespaceSpecifier') parts.push(`${local} = ${mod}`);
            else {
              const imported = s.imported.type === 'Literal' ? src.slice(s.imported.start, s.imported.end) : jsonStringify(s.imported.name);
              named.push(`${imported}: ${local}`);
            }
          }
          if (named.length) parts.push(`{${named.join(', ')}} = ${mod}`);
          let text;
          if (!parts.length) text = `${mod};`;
          else if (isAsync) text = `void (${parts.join(', ')});`;
          else text = `var ${parts.join(', ')};`;
          replaceKeepingLines(st.start, st.end, text);
          break;
        }
        case 'ExpressionStatement':
          // Its whole text, parentheses included, without the semicolon.
          lastExpr = { start: st.start, end: src[st.end - 1] === ';' ? st.end - 1 : st.end };
          break;
        default:
          break;
      }
    }
  } catch (_) {
    return null;
  }

  if (isAsync && lastExpr) {
    insert(lastExpr.start, 'return (');
    insert(lastExpr.end, '\n)');
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

function compileScript(code, filename, lineOffset) {
  return new vm.Script(code, { filename, lineOffset: lineOffset || 0 });
}

/** Compiles the transform of a cell; null if the transform or the compiler gives up. */
function tryCompile(code, tree, mode, filename) {
  try {
    const t = transformCell(code, tree, mode);
    if (!t) return null;
    const script = compileScript(t.code, filename, mode === 'async' ? -1 : 0);
    return { script, lastIsExpr: t.lastIsExpr, async: mode === 'async' };
  } catch (_) {
    return null;
  }
}

/** The mode of a parsed cell: 'async' if it awaits at top level. */
function modeOf(code, parsed) {
  try {
    return parsed.await && code.includes('await') && hasTopLevelAwait(parsed.tree) ? 'async' : 'sync';
  } catch (_) {
    return 'sync';
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
  const parsed = parse(code);
  if (parsed) {
    // An await that is a call of a function named await compiles as a script.
    const mode = modeOf(code, parsed);
    const compiled = tryCompile(code, parsed.tree, mode, filename) ||
      (mode === 'async' ? tryCompile(code, parsed.tree, 'sync', filename) : null);
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

// A cell with what most cells have, to warm the parser before the first
// real one: V8 runs acorn's functions interpreted until they have run a
// while.
const WARM_UP_CELL = "import a from 'a'\nlet b = [1, 'two', `t${3}`, /r/g, {c: 4.5}]; const {d} = b\n" +
  'class E { f(g) { return g?.h ?? null } }\nasync function i() { for (const j of b) await j }\nx = 1 + 2 * i(b)\n';

/**
 * Runs the parser and the transform a few times (at start, before the
 * runtime says hello: sessions take started runtimes from a pool), so that
 * the first cells do not pay for it.
 */
function warmUp() {
  for (let i = 0; i < 5; i++) {
    const parsed = parse(WARM_UP_CELL);
    hasTopLevelAwait(parsed.tree);
    transformCell(WARM_UP_CELL, parsed.tree, 'sync');
    transformCell(WARM_UP_CELL, parsed.tree, 'async');
  }
}

module.exports = { compileCell, warmUp, parse, hasTopLevelAwait, transformCell };
