'use strict';
// The cell transform (transform.js), in process: `node --test` (run by
// TestJavaScriptTransform). The runtime's behaviour end to end is tested
// through its protocol in javascript_test.go.

const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const test = require('node:test');
const vm = require('node:vm');
const acorn = require('../acorn/acorn');
const T = require('../transform');

/** What the runtime compiles for code: {mode, code, lastIsExpr}, or null. */
function rewrite(code) {
  const p = T.parse(code);
  if (!p) return null;
  const mode = p.await && T.hasTopLevelAwait(p.tree) ? 'async' : 'sync';
  const t = T.transformCell(code, p.tree, mode);
  return t && { mode, code: t.code, lastIsExpr: t.lastIsExpr };
}

const wrap = (body, hoisted = '', prelude = '') => `${hoisted}(async () => { ${prelude}\n${body}\n})()`;

test('rewrites', () => {
  const cases = [
    // [cell, mode, what is compiled, whether its value is the result]
    ['x = 1', 'sync', 'x = 1', true],
    ['let a = 1; const b = 2; a + b', 'sync', 'var a = 1; var b = 2; a + b', true],
    ['let u', 'sync', 'var u = void 0;', false],
    ['let x1 = 1, x2', 'sync', 'var x1 = 1, x2 = void 0;', false],
    ['let [d1, {d2}] = [1, {d2: 2}], d3 = 3', 'sync', 'var [d1, {d2}] = [1, {d2: 2}], d3 = 3', false],
    ['class C {}', 'sync', 'var C = class C {};', false],
    ['function f() {}', 'sync', 'function f() {}', false],
    ["import path from 'path'", 'sync', "var path = __airlock__.interopDefault(require('path'));", false],
    ["import p, {a as b, 'c-d' as e} from 'm'", 'sync',
      "var p = __airlock__.interopDefault(require('m')), {\"a\": b, 'c-d': e} = require('m');", false],
    ["import * as ns from 'm'", 'sync', "var ns = require('m');", false],
    ["import 'm'", 'sync', "require('m');", false],
    ["import x from 'm'\n  // two\n\nx", 'sync', "var x = __airlock__.interopDefault(require('m'));\n  // two\n\nx", true],
    ['export const e = 1', 'sync', 'var e = 1', false],
    ['export function ef() {}', 'sync', 'function ef() {}', false],
    ['export default 42', 'sync', '42', true],
    ['export default (1 + 2);', 'sync', '(1 + 2);', true],
    ['export { e }\nx', 'sync', ';\nx', true],
    ["export * from 'm'", 'sync', ';', false],
    ["import('fs'); o.import(1)", 'sync', "__airlock__.import('fs'); o.import(1)", true],
    ['if (true) { 5 }', 'sync', 'if (true) { 5 }', false],
    ['{ let blk = 1 }', 'sync', '{ let blk = 1 }', false],
    ['for (let i = 0; i < 2; i++) {}', 'sync', 'for (let i = 0; i < 2; i++) {}', false],
    ['1;;', 'sync', '1;;', false],
    ['#!/usr/bin/env node\nlet a = 1', 'sync', '#!/usr/bin/env node\nvar a = 1', false],
    // Top-level await: an async body, its declarations hoisted.
    ['await 1; (3)', 'async', wrap('await 1; return ((3)\n)'), true],
    ['const r = await f()\nr', 'async', wrap('void ( r = await f());\nreturn (r\n)', 'var r; '), true],
    ['let q', 'sync', 'var q = void 0;', false],
    ['let q; await 1', 'async', wrap('void ( q = void 0);; return (await 1\n)', 'var q; '), true],
    ['function g() {}; class K {}; await 1;', 'async',
      wrap('function g() {}; K = class K {};; return (await 1\n);', 'var g, K; ', 'this.g = g; '), true],
    ["import x from 'm'; await x", 'async', wrap("void (x = __airlock__.interopDefault(require('m'))); return (await x\n)", 'var x; '), true],
    ['export default await 1', 'async', wrap('return (await 1\n)'), true],
    ['for await (const v of vs) {}', 'async', wrap('for await (const v of vs) {}'), false],
    ['const f2 = async () => { await 1 }', 'sync', 'var f2 = async () => { await 1 }', false],
    // `await (x)` is an await; await as a name is a name.
    ['await (f)', 'async', wrap('return (await (f)\n)'), true],
    ['var await = 1; await', 'sync', 'var await = 1; await', true],
    // Cells the hand-written tokenizer misread, which acorn reads as V8 does.
    ['obj = {await: 1}; obj.await', 'sync', 'obj = {await: 1}; obj.await', true], // was taken for an await
    ["import x from 'm'\n[a, b] = [b, a]", 'sync', "var x = __airlock__.interopDefault(require('m'));\n[a, b] = [b, a]", true], // the second line was dropped
    ['class C {}\n/re/g.test(s)', 'sync', 'var C = class C {};\n/re/g.test(s)', true], // a regex after } was a division
    ['yield\nlet z = 1', 'sync', 'yield\nvar z = 1', false], // yield (a name) ran on into the next line
    ['let u\n[a, b] = [b, a]', 'sync', 'var u = void 0;\n[a, b] = [b, a]', true],
  ];
  for (const [code, mode, want, lastIsExpr] of cases) {
    const got = rewrite(code);
    assert.ok(got, `${JSON.stringify(code)}: not rewritten`);
    assert.deepStrictEqual(got, { mode, code: want, lastIsExpr }, JSON.stringify(code));
    new vm.Script(got.code); // and V8 compiles it
  }
});

test('cells acorn refuses are compiled as written', () => {
  // Invalid JavaScript (V8 reports it), and a name declared twice in one
  // cell, which is an error in JavaScript as it is in V8 (the tokenizer
  // turned both into var and ran the cell).
  for (const code of ['let broken = ;', 'let a = 1; let a = 2', 'class C {}; class C {}', 'return 1', 'await 1\nfoo(']) {
    assert.strictEqual(rewrite(code), null, code);
  }
});

test('compileCell', () => {
  const c = (code) => T.compileCell(code, 7);
  assert.deepStrictEqual([c('{a: 1}').lastIsExpr, c('{a: 1}').async], [true, false]); // one object literal
  assert.strictEqual(c('await 1\nreturn 2').async, true); // a plain async body: acorn refuses the return
  assert.throws(() => c('let ok = 1\nlet broken = ;'), (e) => e instanceof SyntaxError && /Cell In\[7\]:2/.test(e.stack));
  assert.throws(() => c('let a = 1; let a = 2'), /has already been declared/);
});

// A differential fuzz with a fixed seed: cells made of the fragments in
// fragments.txt (tokens that fool a tokenizer: regexes, templates, comments,
// await and let as names, line breaks where ASI decides) on which acorn and
// V8 must agree, and whose transform V8 must compile with the cell's lines.
test('acorn and V8 agree; every transform compiles and keeps the lines', () => {
  const frags = fs.readFileSync(path.join(__dirname, 'fragments.txt'), 'utf8').split('\n@@\n');
  let seed = 19;
  const rnd = () => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed / 0x7fffffff; };
  const v8ok = (code) => { try { new vm.Script(code); return true; } catch (_) { return false; } };
  const acornOk = (code) => {
    try {
      acorn.parse(code, { ecmaVersion: 'latest', sourceType: 'script', allowHashBang: true });
      return true;
    } catch (_) {
      return false;
    }
  };
  const lines = (s) => s.split(/\r\n|[\n\r\u2028\u2029]/).length;
  let transformed = 0;
  for (let i = 0; i < 4000; i++) {
    const parts = [];
    for (let j = 1 + Math.floor(rnd() * 4); j > 0; j--) parts.push(frags[Math.floor(rnd() * frags.length)]);
    const code = parts.join(rnd() < 0.5 ? '\n' : '; ');
    if (!/^\s*(import|export)\b|[\n;] (import|export)\b/.test(code)) { // module syntax: a SyntaxError in V8's scripts
      assert.strictEqual(acornOk(code), v8ok(code), `script: ${JSON.stringify(code)}`);
      const body = `(async () => {\n${code}\n})()`;
      assert.strictEqual(acornOk(body), v8ok(body), `async body: ${JSON.stringify(code)}`);
    }
    const t = rewrite(code);
    if (!t) continue;
    transformed++;
    assert.doesNotThrow(() => new vm.Script(t.code), `${JSON.stringify(code)} -> ${JSON.stringify(t.code)}`);
    const want = lines(code) + (t.mode === 'async' ? 2 + (t.lastIsExpr ? 1 : 0) : 0);
    assert.strictEqual(lines(t.code), want, `lines of ${JSON.stringify(code)} -> ${JSON.stringify(t.code)}`);
  }
  assert.ok(transformed > 2000, `only ${transformed} cells transformed`);
});

test('warmUp', () => {
  T.warmUp();
});
