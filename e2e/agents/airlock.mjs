// A minimal airlock client for JavaScript agent tools (fetch only): create
// a session once, run code in it, keep its state across tool calls. The
// tests' agent loops use it; copy it into your own project as a start.
export class AirlockSession {
  constructor({ url = process.env.AIRLOCK_URL, token = process.env.AIRLOCK_TOKEN, language = 'python' } = {}) {
    this.url = url.replace(/\/$/, '');
    this.token = token;
    this.language = language;
    this.id = null;
  }

  async #call(method, path, body) {
    const headers = { 'Content-Type': 'application/json' };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    const res = await fetch(this.url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    const data = text ? JSON.parse(text) : null;
    if (!res.ok) throw new Error(`airlock: ${res.status} ${data?.error?.code}: ${data?.error?.message}`);
    return data;
  }

  // runCode runs code in the session (created on first use) and returns
  // what a model reads well: stdout, the result, the error, files, images.
  async runCode(code, { timeout } = {}) {
    if (!this.id) this.id = (await this.#call('POST', '/v1/sessions', { language: this.language })).id;
    const r = await this.#call('POST', `/v1/sessions/${this.id}/execute`, timeout ? { code, timeout } : { code });
    const parts = [];
    if (r.stdout) parts.push(r.stdout.trimEnd());
    if (r.stderr) parts.push(`stderr: ${r.stderr.trimEnd()}`);
    const images = [];
    for (const o of r.results) {
      if (o.type === 'result' && o.data['text/plain']) parts.push(o.data['text/plain']);
      if (o.data['image/png']) images.push(o.data['image/png']);
    }
    if (r.error) parts.push(`${r.error.name}: ${r.error.value}\n${r.error.traceback.join('\n')}`);
    for (const f of r.files_changed) parts.push(`file ${f.change}: /workspace/${f.path}`);
    return { text: parts.join('\n') || '(no output)', images, result: r };
  }

  async close() {
    if (this.id) await this.#call('DELETE', `/v1/sessions/${this.id}`).catch(() => {});
    this.id = null;
  }
}
