// The agents guide's JavaScript module (docs/guides/agents.md, "LangChain
// JS, Vercel AI, and the HTTP API"), run exactly as pasted: written to a file beside airlock.mjs and
// run by node against the test's server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { promisify } from 'node:util';

const here = path.dirname(fileURLToPath(import.meta.url));

function guideBlock(section, lang) {
  const text = readFileSync(path.join(here, '..', '..', 'docs', 'guides', 'agents.md'), 'utf8');
  const start = text.indexOf(`\n## ${section}\n`);
  assert.ok(start >= 0, `docs/guides/agents.md has no section ${section}`);
  const rest = text.slice(start + 1);
  const end = rest.slice(3).search(/\n## /);
  const body = end < 0 ? rest : rest.slice(0, end + 3);
  const blocks = [...body.matchAll(new RegExp('^```' + lang + '\\n([\\s\\S]*?)^```', 'gm'))].map((m) => m[1]);
  assert.equal(blocks.length, 1, `one ${lang} block in ${section}`);
  return blocks[0];
}

test('the agents guide JavaScript module runs as pasted', async () => {
  const file = path.join(here, `.readme-snippet-${process.pid}.mjs`);
  writeFileSync(file, guideBlock('LangChain JS, Vercel AI, and the HTTP API', 'js'));
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [file], { cwd: here, env: process.env, timeout: 120_000 });
    assert.equal(stdout, '42\n');
  } finally {
    rmSync(file, { force: true });
  }
});
