// The official MCP TypeScript client across a restart of the server
// (run by e2e/mcp_restart_test.go, not by node --test): before it, the
// client uses its default session and a session of create_session; it
// prints their ids, then waits for a line on stdin with the restarted
// server's URL. Its old MCP session is gone (404), as the protocol has
// it: it connects again, as clients do, finds the named session paused
// (list_sessions) and resumes it by naming it, its files intact. It
// prints what it saw as JSON; the Go test checks it.
import assert from 'node:assert/strict';
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const { AIRLOCK_URL, AIRLOCK_TOKEN } = process.env;

async function connect(url) {
  const client = new Client({ name: 'airlock-restart-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url + '/mcp'), {
    requestInit: { headers: { Authorization: `Bearer ${AIRLOCK_TOKEN}` } },
  });
  await client.connect(transport);
  client.terminate = () => transport.terminateSession();
  return client;
}

const text = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');

async function call(client, name, args) {
  const res = await client.callTool({ name, arguments: args });
  assert.ok(!res.isError, `${name}: ${text(res)}`);
  return res;
}

const before = await connect(AIRLOCK_URL);
const { tools } = await before.listTools();
for (const want of ['pause_session', 'resume_session', 'fork_session', 'list_sessions']) {
  assert.ok(tools.some((t) => t.name === want), `tool ${want}`);
}
let res = await call(before, 'execute_code', { code: 'x = 1' });
const def = res.structuredContent.session_id;
res = await call(before, 'create_session', {});
const made = res.structuredContent.session_id;
await call(before, 'write_file', { path: 'keep.txt', content: 'kept across the restart', session_id: made });
console.log(JSON.stringify({ def, made }));

const lines = createInterface({ input: process.stdin });
const url = (await lines[Symbol.asyncIterator]().next()).value.trim();

// The old MCP session is gone with the server that held it.
let oldError = '';
try {
  await before.callTool({ name: 'execute_code', arguments: { code: 'x' } });
} catch (e) {
  oldError = String(e.message ?? e);
}
before.close().catch(() => {});

const after = await connect(url);
res = await call(after, 'list_sessions', {});
const listed = res.structuredContent.sessions;
res = await call(after, 'execute_code', { code: "print(open('keep.txt').read())", session_id: made });
console.log(JSON.stringify({
  oldError,
  listed,
  stdout: res.structuredContent.stdout,
  note: res.structuredContent.note ?? '',
}));
// DELETE: the connection ends, and the session it named with it.
await after.terminate();
await after.close();
lines.close();
