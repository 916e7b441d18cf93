// The official MCP TypeScript client against `airlock mcp --url`, the stdio
// bridge a desktop client starts as its user (here nobody) to reach a remote
// server's /mcp with an API key; and parallel tool calls, as agents send them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const { AIRLOCK_URL, AIRLOCK_TOKEN, AIRLOCK_USER_BIN } = process.env;

function bridge(key) {
  return new StdioClientTransport({
    command: process.execPath,
    args: [new URL('./as-user.mjs', import.meta.url).pathname, AIRLOCK_USER_BIN, 'mcp', '--url', AIRLOCK_URL + '/mcp'],
    env: { PATH: process.env.PATH, AIRLOCK_API_KEY: key },
    stderr: 'inherit',
  });
}

const text = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');

test('MCP through `airlock mcp --url` as an unprivileged user: state, parallel calls', async () => {
  const client = new Client({ name: 'airlock-bridge-test', version: '1.0.0' });
  await client.connect(bridge(AIRLOCK_TOKEN));
  try {
    let res = await client.callTool({ name: 'execute_code', arguments: { code: 'n = 0' } });
    assert.ok(!res.isError, text(res));
    // Parallel calls on the default session take turns: none fails, no
    // increment is lost.
    const calls = Array.from({ length: 4 }, () =>
      client.callTool({ name: 'execute_code', arguments: { code: 'import time\nm = n\ntime.sleep(0.05)\nn = m + 1' } }));
    for (const r of await Promise.all(calls)) assert.ok(!r.isError, text(r));
    res = await client.callTool({ name: 'execute_code', arguments: { code: 'n' } });
    assert.equal(res.structuredContent.result, '4', text(res));
    res = await client.callTool({ name: 'execute_code', arguments: { code: 'exit 3', language: 'bash' } });
    assert.equal(res.isError, true, text(res));
    assert.equal(res.structuredContent.exit_code, 3);
  } finally {
    await client.close();
  }
});

test('MCP through `airlock mcp --url` with a bad key: an error that names the key, no OAuth', async () => {
  const client = new Client({ name: 'airlock-bridge-test', version: '1.0.0' });
  await assert.rejects(client.connect(bridge('alk_not-a-key')), (err) => /bad or missing API key/.test(String(err)));
  await client.close();
});
