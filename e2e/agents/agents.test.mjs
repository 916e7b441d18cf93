// Real agent loops with scripted fake models (no LLM, no network): each
// framework drives a real airlock session, and the test checks what the
// model is handed back.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { AirlockSession } from './airlock.mjs';

const { AIRLOCK_BIN, AIRLOCK_CONFIG } = process.env;

const description = 'A Python shell. Use this to execute python code; state persists between calls. ' +
  'Input should be valid python code. Always save files to /workspace.';

test('LangChain JS: a tool-calling agent loop with a fake model', async () => {
  const { tool } = await import('@langchain/core/tools');
  const { fakeModel } = await import('@langchain/core/testing');
  const { HumanMessage, AIMessage } = await import('@langchain/core/messages');
  const session = new AirlockSession();
  try {
    // The agents guide's LangChain JS tool.
    const pythonTool = tool(async ({ code }) => (await session.runCode(code)).text, {
      name: 'python_code_interpreter',
      description,
      schema: z.object({ code: z.string().describe('python code to run') }),
    });
    const model = fakeModel()
      .respondWithTools([{ name: 'python_code_interpreter', args: { code: 'x = 41' }, id: 'call-1' }])
      .respondWithTools([{ name: 'python_code_interpreter', args: { code: 'x + 1' }, id: 'call-2' }])
      .respond(new AIMessage('x + 1 is 42'));
    const agent = model.bindTools([pythonTool]);
    const messages = [new HumanMessage('Set x to 41, then compute x + 1.')];
    for (let turn = 0; turn < 5; turn++) {
      const ai = await agent.invoke(messages);
      messages.push(ai);
      if (!ai.tool_calls?.length) break;
      for (const call of ai.tool_calls) messages.push(await pythonTool.invoke(call));
    }
    const toolMessages = messages.filter((m) => m.getType() === 'tool');
    assert.equal(toolMessages.length, 2);
    assert.equal(toolMessages[1].content, '42');
    assert.equal(messages.at(-1).content, 'x + 1 is 42');
    // The model saw the tool's output when it answered.
    assert.equal(model.calls.at(-1).messages.at(-1).content, '42');
  } finally {
    await session.close();
  }
});

test('OpenAI Agents SDK: an agent with airlock as an MCP server (stdio), state across calls', async () => {
  const { Agent, run, MCPServerStdio, setTracingDisabled, Usage } = await import('@openai/agents');
  setTracingDisabled(true);
  // The agents guide's OpenAI Agents configuration.
  const airlock = new MCPServerStdio({ name: 'airlock', command: AIRLOCK_BIN, args: ['mcp', '--config', AIRLOCK_CONFIG] });
  await airlock.connect();
  try {
    const seen = [];
    const call = (id, code) => ({ type: 'function_call', callId: id, name: 'execute_code', arguments: JSON.stringify({ code }), status: 'completed' });
    const script = [
      [call('c1', 'x = 41')],
      [call('c2', 'x + 1')],
      [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'It is 42.' }] }],
    ];
    const model = {
      async getResponse(request) {
        seen.push(request);
        return { usage: new Usage(), output: script[seen.length - 1], responseId: `r${seen.length}` };
      },
      async *getStreamedResponse() {
        throw new Error('not streamed');
      },
    };
    const agent = new Agent({ name: 'coder', instructions: 'Use execute_code.', model, mcpServers: [airlock] });
    const result = await run(agent, 'Set x to 41, then compute x + 1.');
    assert.equal(result.finalOutput, 'It is 42.');
    const outputs = result.newItems.filter((i) => i.type === 'tool_call_output_item').map((i) => JSON.stringify(i.output));
    assert.equal(outputs.length, 2);
    assert.match(outputs[1], /result:\\n42/);
    assert.ok(seen[0].tools.some((t) => t.name === 'execute_code'), 'the model was offered execute_code');
  } finally {
    await airlock.close();
  }
});

test('Vercel AI SDK: generateText with a mock model calling an airlock tool', async () => {
  const { generateText, tool, stepCountIs } = await import('ai');
  const { MockLanguageModelV3 } = await import('ai/test');
  const session = new AirlockSession();
  try {
    const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
    let step = 0;
    const prompts = [];
    const model = new MockLanguageModelV3({
      doGenerate: async ({ prompt }) => {
        prompts.push(prompt);
        step++;
        if (step === 1) {
          return {
            content: [{ type: 'tool-call', toolCallId: 't1', toolName: 'runPython', input: JSON.stringify({ code: 'import statistics\nstatistics.mean([40, 44])' }) }],
            finishReason: { unified: 'tool-calls', raw: undefined }, usage, warnings: [],
          };
        }
        return { content: [{ type: 'text', text: 'The mean is 42.' }], finishReason: { unified: 'stop', raw: undefined }, usage, warnings: [] };
      },
    });
    // The agents guide's Vercel AI tool.
    const runPython = tool({
      description,
      inputSchema: z.object({ code: z.string() }),
      execute: async ({ code }) => (await session.runCode(code)).text,
    });
    const result = await generateText({ model, tools: { runPython }, prompt: 'What is the mean of 40 and 44?', stopWhen: stepCountIs(3) });
    assert.equal(result.text, 'The mean is 42.');
    assert.equal(result.steps[0].toolResults[0].output, '42');
    assert.match(JSON.stringify(prompts[1]), /42/);
  } finally {
    await session.close();
  }
});
