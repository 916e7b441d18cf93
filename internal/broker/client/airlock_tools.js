'use strict';
/**
 * Call the tools of this airlock session.
 *
 * airlock makes the call on the host side, with the tool's credential,
 * which this sandbox never sees; it checks the arguments against the
 * tool's schema first and refuses with a reason naming the argument and
 * the rule:
 *
 *   const { call, listTools, ToolError } = require('airlock_tools');
 *   await listTools();
 *   const hits = await call('search', { query: 'sandboxing', limit: 5 });
 *   try { await call('search', { query: 'x'.repeat(10000) }); }
 *   catch (e) { if (e instanceof ToolError) console.log(e.code, e.field, e.rule, e.message); }
 *
 * A JSON answer comes back decoded, text as a string, anything else as a
 * Buffer; callRaw() gives the whole answer.
 */
const http = require('http');

const DEFAULT_URL = 'http://127.0.0.1:3129';

class ToolError extends Error {
  constructor(tool, code, message, { field, rule, retryAfter, failed, result } = {}) {
    const where = field ? ` (argument ${JSON.stringify(field)}, rule ${rule})` : (rule ? ` (${rule})` : '');
    super(`${tool}: ${code}: ${message}${where}`);
    this.name = 'ToolError';
    Object.assign(this, { tool, code, field, rule, retryAfter, failed: !!failed, result });
    this.reason = message;
  }
}

function address() {
  const u = new URL(process.env.AIRLOCK_TOOLS_URL || DEFAULT_URL);
  return { host: u.hostname || '127.0.0.1', port: Number(u.port) || 80 };
}

function request(tool, method, path, body) {
  return new Promise((resolve, reject) => {
    const { host, port } = address();
    const headers = body === undefined ? {} : { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) };
    if (process.env.AIRLOCK_CONTEXT) headers['X-Airlock-Context'] = process.env.AIRLOCK_CONTEXT;
    const req = http.request({ host, port, method, path, headers, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        try {
          resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
        } catch (e) {
          reject(new ToolError(tool, 'unavailable', `airlock's tools answered HTTP ${res.statusCode} with no JSON`));
        }
      });
      res.on('error', reject);
    });
    req.on('error', (e) => reject(new ToolError(tool, 'unavailable',
      `airlock's tools do not answer in this sandbox: the session was created without tools (create it with "tools": [...]) (${e.code || e.message})`)));
    if (body !== undefined) req.write(body);
    req.end();
  });
}

/** The session's tools: name, description, kind, writable, arguments (a JSON Schema). */
async function listTools() {
  const answer = await request('listTools', 'GET', '/v1/tools');
  return answer.tools || [];
}

/** Calls tool name; resolves to its whole answer (status, json/text/base64, stderr, bytes). */
async function callRaw(name, args = {}) {
  if (typeof name !== 'string' || !name) throw new TypeError('call: the tool\'s name must be a non-empty string');
  const answer = await request(name, 'POST', '/v1/tools/' + encodeURIComponent(name), JSON.stringify(args || {}));
  if (!answer.ok) {
    const e = answer.error || {};
    throw new ToolError(name, e.code || 'internal', e.message || 'refused',
      { field: e.field, rule: e.rule, retryAfter: e.retry_after_ms ? e.retry_after_ms / 1000 : undefined, failed: e.failed });
  }
  return answer.result;
}

function body(result) {
  if ('json' in result) return result.json;
  if ('text' in result) return result.text;
  return Buffer.from(result.base64 || '', 'base64');
}

/**
 * Calls tool name with args (an object). Resolves to the answer's body;
 * rejects with a ToolError when airlock refuses the call, when it fails,
 * or when the tool answers an HTTP error status or exits non-zero.
 */
async function call(name, args = {}) {
  const result = await callRaw(name, args);
  const status = result.status || 0;
  if (result.kind === 'command' && status !== 0) {
    const last = (result.stderr || '').trim().split('\n').pop() || '';
    throw new ToolError(name, 'tool_exit', `the command exited with status ${status}: ${last.slice(0, 300)}`, { result });
  }
  if (result.kind === 'http' && status >= 400) {
    throw new ToolError(name, 'tool_status', `the tool answered HTTP ${status}`, { result });
  }
  return body(result);
}

module.exports = { call, callRaw, listTools, list_tools: listTools, ToolError };
