// The exact requests the major agent frameworks send to OpenAI and
// Anthropic after calling airlock's execute_code over MCP, captured by a
// local stand-in for the providers' APIs (no network, no key): a tool
// call whose code draws a plot, writes a file and prints a lot. Each
// request must be one the provider accepts (the tool result's shape in
// its API) and bounded (no base64 blob as text, the output capped): by
// default airlock's results are text, which every converter handles.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';

const { AIRLOCK_BIN, AIRLOCK_CONFIG } = process.env;
// `airlock mcp` with the default results (text), or with images too.
const stdioServer = (images) => ({ command: AIRLOCK_BIN, args: ['mcp', '--config', AIRLOCK_CONFIG, ...(images ? ['--content', 'image'] : [])] });

// The converters that turn an image in a tool result into an image part
// of a valid request (docs/guides/agents.md: "What a result carries besides text"); the others refuse it
// (LangChain's ChatOpenAI on Chat Completions) or send it as base64 text
// (LangChain on Responses, the Vercel AI SDK on Chat Completions).
const takesImages = {
  langchain: ['anthropic'],
  agents: ['openai-responses', 'openai-chat'], // Chat Completions: the image is dropped, the text kept
  vercel: ['openai-responses', 'anthropic'],
};

const code = [
  'import matplotlib.pyplot as plt',
  "plt.plot([1, 4, 9]); plt.title('squares')",
  "open('squares.csv', 'w').write('x,y\\n1,1\\n2,4\\n3,9\\n')",
  "print('\\n'.join(f'row {i}: ' + 'x' * 40 for i in range(5000)))",
  'plt.show()',
].join('\n');

// A stand-in for api.openai.com and api.anthropic.com: the first request
// gets a call of the tool named like execute_code, the next ones a final
// answer; every request body is kept.
async function provider() {
  const requests = [];
  const server = http.createServer(async (req, res) => {
    let raw = '';
    for await (const chunk of req) raw += chunk;
    const body = JSON.parse(raw);
    requests.push({ path: req.url, body });
    const tools = (body.tools ?? []).map((t) => t.name ?? t.function?.name);
    const name = tools.find((n) => /execute_code/.test(n ?? ''));
    const first = requests.length === 1;
    let answer;
    if (req.url.endsWith('/chat/completions')) {
      const message = first
        ? { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name, arguments: JSON.stringify({ code }) } }] }
        : { role: 'assistant', content: 'The plot shows squares.' };
      answer = { id: 'c', object: 'chat.completion', created: 1, model: body.model, choices: [{ index: 0, message, finish_reason: first ? 'tool_calls' : 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } };
    } else if (req.url.endsWith('/responses')) {
      const output = first
        ? [{ type: 'function_call', id: 'fc_1', call_id: 'call_1', name, arguments: JSON.stringify({ code }), status: 'completed' }]
        : [{ type: 'message', id: 'msg_1', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'The plot shows squares.', annotations: [] }] }];
      answer = { id: `resp_${requests.length}`, object: 'response', created_at: 1, status: 'completed', model: body.model, output, usage: { input_tokens: 1, output_tokens: 1, total_tokens: 2, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } } };
    } else if (req.url.endsWith('/messages')) {
      const content = first ? [{ type: 'tool_use', id: 'toolu_1', name, input: { code } }] : [{ type: 'text', text: 'The plot shows squares.' }];
      answer = { id: 'msg_1', type: 'message', role: 'assistant', model: body.model, content, stop_reason: first ? 'tool_use' : 'end_turn', stop_sequence: null, usage: { input_tokens: 1, output_tokens: 1 } };
    } else {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  const url = `http://127.0.0.1:${server.address().port}`;
  return { url, requests, close: () => new Promise((ok) => server.close(ok)) };
}

// The tool results in a request, in each provider's API.
function toolResults(api, body) {
  switch (api) {
    case 'openai-chat':
      return body.messages.filter((m) => m.role === 'tool');
    case 'openai-responses':
      return body.input.filter((i) => i.type === 'function_call_output');
    case 'anthropic':
      return body.messages.flatMap((m) => (Array.isArray(m.content) ? m.content : [])).filter((b) => b.type === 'tool_result');
  }
}

// What each API accepts as a tool result (its reference): Chat
// Completions, text only (images only in user messages); Responses,
// input_text, input_image (a data: or https: URL) and input_file;
// Messages, text and image blocks (base64 or https).
function accepted(api, result) {
  const parts = api === 'openai-responses' ? result.output : result.content;
  if (typeof parts === 'string') return [];
  if (!Array.isArray(parts)) return [`not a string or a list: ${JSON.stringify(parts).slice(0, 200)}`];
  const bad = [];
  for (const p of parts) {
    const ok = {
      'openai-chat': () => p.type === 'text' && typeof p.text === 'string',
      'openai-responses': () => (p.type === 'input_text' && typeof p.text === 'string') ||
        (p.type === 'input_image' && /^(data:image\/|https:)/.test(p.image_url ?? '')) ||
        (p.type === 'input_file' && (p.file_id || p.file_data || /^https:/.test(p.file_url ?? ''))),
      anthropic: () => (p.type === 'text' && typeof p.text === 'string') ||
        (p.type === 'image' && (p.source?.type === 'base64' || (p.source?.type === 'url' && /^https:/.test(p.source.url)))),
    }[api]();
    if (!ok) bad.push(`a ${p.type} part: ${JSON.stringify(p).slice(0, 200)}`);
  }
  return bad;
}

// Every text of a request, walked; images is where image parts' data
// goes (a data: URL, or the base64 of an Anthropic image block).
function strings(v, out = [], images = []) {
  if (typeof v === 'string') out.push(v);
  else if (Array.isArray(v)) v.forEach((x) => strings(x, out, images));
  else if (v && typeof v === 'object') {
    for (const [k, x] of Object.entries(v)) {
      if ((k === 'image_url' && typeof x === 'string' && x.startsWith('data:image/')) || (k === 'data' && v.type === 'base64')) images.push(x);
      else strings(x, out, images);
    }
  }
  return out;
}

function check(api, requests, { image = false } = {}) {
  const last = requests.at(-1);
  assert.ok(requests.length >= 2, `the model was asked ${requests.length} time(s)`);
  const results = toolResults(api, last.body);
  assert.equal(results.length, 1, `tool results in ${JSON.stringify(last.body).slice(0, 500)}`);
  assert.deepEqual(accepted(api, results[0]), [], `${api} refuses this tool result`);
  const sent = JSON.stringify(last.body);
  assert.ok(sent.length < 64 << 10, `the request is ${sent.length} bytes`);
  const images = [];
  const blob = strings(last.body, [], images).map((s) => s.match(/[A-Za-z0-9+/]{1000,}={0,2}/)).find(Boolean);
  assert.ok(!blob, `base64 of ${blob?.[0].length} characters as text`);
  if (image && api !== 'openai-chat') assert.equal(images.length, 1, 'the plot is not an image part');
  const seen = strings(results[0]).join('\n');
  // What the model reads: the file by name, the plot said, the output
  // capped with its end kept.
  for (const want of ['/workspace/squares.csv', image ? 'attached as an image block' : 'image/png', 'row 4999:', 'bytes left out']) {
    assert.ok(seen.includes(want), `the model does not read ${JSON.stringify(want)}: ${seen.slice(0, 600)}`);
  }
}

const providers = [];
after(() => Promise.all(providers.map((p) => p.close())));
async function stub() {
  const p = await provider();
  providers.push(p);
  return p;
}

for (const images of [false, true]) {
const mode = images ? 'with --content image, the converters that take images' : 'the default results';

test(`LangChain JS (@langchain/mcp-adapters): ChatOpenAI (Chat Completions and Responses) and ChatAnthropic; ${mode}`, async (t) => {
  const { MultiServerMCPClient } = await import('@langchain/mcp-adapters');
  const { ChatOpenAI } = await import('@langchain/openai');
  const { ChatAnthropic } = await import('@langchain/anthropic');
  const { HumanMessage } = await import('@langchain/core/messages');
  const mcp = new MultiServerMCPClient({ mcpServers: { airlock: { transport: 'stdio', ...stdioServer(images) } } });
  try {
    const tools = await mcp.getTools();
    const models = {
      'openai-chat': (url) => new ChatOpenAI({ model: 'gpt-4o', apiKey: 'test', configuration: { baseURL: `${url}/v1` } }),
      'openai-responses': (url) => new ChatOpenAI({ model: 'gpt-4o', apiKey: 'test', useResponsesApi: true, configuration: { baseURL: `${url}/v1` } }),
      anthropic: (url) => new ChatAnthropic({ model: 'claude-sonnet-4-5', apiKey: 'test', anthropicApiUrl: url }),
    };
    for (const [api, make] of Object.entries(models)) {
      if (images && !takesImages.langchain.includes(api)) continue;
      await t.test(api, async () => {
        const p = await stub();
        const model = make(p.url).bindTools(tools);
        const messages = [new HumanMessage('Plot the squares of 1, 2, 3 and save them as a CSV.')];
        for (let turn = 0; turn < 3; turn++) {
          const ai = await model.invoke(messages);
          messages.push(ai);
          if (!ai.tool_calls?.length) break;
          for (const call of ai.tool_calls) messages.push(await tools.find((x) => x.name === call.name).invoke(call));
        }
        check(api, p.requests, { image: images });
      });
    }
  } finally {
    await mcp.close();
  }
});

test(`OpenAI Agents SDK (@openai/agents, MCPServerStdio): Responses and Chat Completions; ${mode}`, async (t) => {
  const { Agent, Runner, MCPServerStdio, OpenAIProvider, setTracingDisabled } = await import('@openai/agents');
  setTracingDisabled(true);
  const airlock = new MCPServerStdio({ name: 'airlock', ...stdioServer(images) });
  await airlock.connect();
  try {
    for (const [api, useResponses] of [['openai-responses', true], ['openai-chat', false]]) {
      if (images && !takesImages.agents.includes(api)) continue;
      await t.test(api, async () => {
        const p = await stub();
        const runner = new Runner({ modelProvider: new OpenAIProvider({ apiKey: 'test', baseURL: `${p.url}/v1`, useResponses }) });
        const agent = new Agent({ name: 'coder', instructions: 'Use execute_code.', model: 'gpt-4o', mcpServers: [airlock] });
        const result = await runner.run(agent, 'Plot the squares of 1, 2, 3 and save them as a CSV.');
        assert.equal(result.finalOutput, 'The plot shows squares.');
        check(api, p.requests, { image: images });
      });
    }
  } finally {
    await airlock.close();
  }
});

test(`Vercel AI SDK (@ai-sdk/mcp): OpenAI (Responses and Chat Completions) and Anthropic; ${mode}`, async (t) => {
  const { generateText, stepCountIs } = await import('ai');
  const { createMCPClient } = await import('@ai-sdk/mcp');
  const { Experimental_StdioMCPTransport } = await import('@ai-sdk/mcp/mcp-stdio');
  const { createOpenAI } = await import('@ai-sdk/openai');
  const { createAnthropic } = await import('@ai-sdk/anthropic');
  const mcp = await createMCPClient({ transport: new Experimental_StdioMCPTransport(stdioServer(images)) });
  try {
    const tools = await mcp.tools();
    const models = {
      'openai-responses': (url) => createOpenAI({ apiKey: 'test', baseURL: `${url}/v1` }).responses('gpt-4o'),
      'openai-chat': (url) => createOpenAI({ apiKey: 'test', baseURL: `${url}/v1` }).chat('gpt-4o'),
      anthropic: (url) => createAnthropic({ apiKey: 'test', baseURL: `${url}/v1` })('claude-sonnet-4-5'),
    };
    for (const [api, make] of Object.entries(models)) {
      if (images && !takesImages.vercel.includes(api)) continue;
      await t.test(api, async () => {
        const p = await stub();
        const result = await generateText({ model: make(p.url), tools, prompt: 'Plot the squares of 1, 2, 3 and save them as a CSV.', stopWhen: stepCountIs(3) });
        assert.equal(result.text, 'The plot shows squares.');
        check(api, p.requests, { image: images });
      });
    }
  } finally {
    await mcp.close();
  }
});
}
