'use strict';
/*
 * Compiling a cell for a persistent namespace (the model is in runtime.js):
 * top-level let, const and class become var-like, static imports become
 * require() calls, export keywords go, import() resolves from the current
 * directory, and a cell that awaits at top level runs as an async body
 * with its declarations hoisted out as globals. compileCell returns the
 * vm.Script and whether its value is the cell's result.
 */

const vm = require('vm');
const { cellName } = require('./current');
const { jsonStringify } = require('./primordials');

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

module.exports = { compileCell };
