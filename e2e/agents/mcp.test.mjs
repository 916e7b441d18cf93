// The official MCP TypeScript client against `airlock mcp` (stdio) and the
// streamable HTTP transport at /mcp.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const { AIRLOCK_URL, AIRLOCK_TOKEN, AIRLOCK_BIN, AIRLOCK_CONFIG } = process.env;

// The agents guide's MCP configuration for stdio clients, as the tests use it.
const stdioServer = { command: AIRLOCK_BIN, args: ['mcp', '--config', AIRLOCK_CONFIG] };

function stdio() {
  return new StdioClientTransport({ ...stdioServer, stderr: 'inherit' });
}

function http(token = AIRLOCK_TOKEN, query = '') {
  return new StreamableHTTPClientTransport(new URL(AIRLOCK_URL + '/mcp' + query), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
}

async function connected(transport) {
  const client = new Client({ name: 'airlock-test', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

const text = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');

// stdio with the default results (text only), HTTP with the blocks a
// client may ask for (images and resource links).
const rich = () => http(AIRLOCK_TOKEN, '?content=image,resource_link');
for (const [name, transport] of [['stdio', stdio], ['http', rich]]) {
  test(`MCP over ${name}: tools, state, images, files, errors`, async () => {
    const client = await connected(transport());
    try {
      const { tools } = await client.listTools();
      const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
      for (const want of ['execute_code', 'run_command', 'write_file', 'read_file', 'list_files', 'create_session', 'close_session']) {
        assert.ok(byName[want], `tool ${want}`);
      }
      assert.deepEqual(byName.execute_code.inputSchema.required, ['code']);
      assert.deepEqual(byName.execute_code.inputSchema.properties.language.enum, ['python', 'bash', 'javascript']);
      assert.ok(byName.execute_code.outputSchema.properties.session_id);

      let res = await client.callTool({ name: 'execute_code', arguments: { code: 'x = 41' } });
      assert.ok(!res.isError, text(res));
      res = await client.callTool({ name: 'execute_code', arguments: { code: 'x + 1' } });
      assert.equal(res.structuredContent.result, '42', text(res));

      res = await client.callTool({
        name: 'execute_code',
        arguments: { code: "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()\nopen('out.txt', 'w').write('made by code')" },
      });
      assert.match(text(res), /file created: \/workspace\/out\.txt/);
      if (name === 'stdio') {
        // The default: text alone, which says what there is.
        assert.deepEqual(res.content.map((c) => c.type), ['text']);
        assert.match(text(res), /image\/png, \d+ bytes: not attached/);
        const read = await client.callTool({ name: 'read_file', arguments: { path: '/workspace/out.txt' } });
        assert.equal(text(read), 'made by code');
      } else {
        const image = res.content.find((c) => c.type === 'image');
        assert.ok(image, text(res));
        assert.equal(image.mimeType, 'image/png');
        assert.deepEqual([...Buffer.from(image.data, 'base64').subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
        const link = res.content.find((c) => c.type === 'resource_link');
        assert.ok(link && link.uri.endsWith('/files/out.txt'), JSON.stringify(res.content));
        const read = await client.readResource({ uri: link.uri });
        assert.equal(read.contents[0].text, 'made by code');
      }

      res = await client.callTool({ name: 'execute_code', arguments: { code: "raise ValueError('boom')" } });
      assert.equal(res.isError, true);
      assert.match(text(res), /ValueError: boom/);
      assert.equal(res.structuredContent.error.name, 'ValueError');

      res = await client.callTool({ name: 'execute_code', arguments: {} });
      assert.equal(res.isError, true, 'a missing argument is a tool error');

      res = await client.callTool({ name: 'run_command', arguments: { command: 'cat out.txt' } });
      assert.equal(res.structuredContent.stdout, 'made by code');
    } finally {
      await client.close();
    }
  });
}

test('MCP over http: an unknown content block or parameter is refused with 400', async () => {
  for (const query of ['?content=video', '?images=1']) {
    await assert.rejects(connected(http(AIRLOCK_TOKEN, query)), (err) => /400|content/.test(String(err)), query);
  }
});

test('MCP over http: a wrong token is refused with 401', async () => {
  await assert.rejects(connected(http('not-the-token')), (err) => /401|Unauthorized/i.test(String(err)));
});

test('MCP: a long execution with progress outlives a short client timeout', async () => {
  const client = await connected(http());
  try {
    const progress = [];
    const res = await client.callTool(
      { name: 'execute_code', arguments: { code: "import time\nfor i in range(6):\n    print('tick', i, flush=True)\n    time.sleep(0.5)\n'done'" } },
      undefined,
      { timeout: 1000, resetTimeoutOnProgress: true, onprogress: (p) => progress.push(p) },
    );
    assert.equal(res.structuredContent.result, "'done'", text(res));
    assert.ok(progress.length >= 2, `progress notifications: ${progress.length}`);
    assert.match(progress.map((p) => p.message).join(''), /tick 0/);
  } finally {
    await client.close();
  }
});
