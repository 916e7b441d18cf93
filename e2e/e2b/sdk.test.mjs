// E2B's official JS SDKs, unchanged, against airlock: E2B_API_URL and
// E2B_SANDBOX_URL point at the server, E2B_API_KEY is an airlock key in
// E2B's form (e2b_<hex>). Run by e2e/e2b_test.go.
import { test } from 'node:test'
import http from 'node:http'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { Sandbox as BaseSandbox, CommandExitError, FileNotFoundError, InvalidArgumentError, SandboxNotFoundError, TimeoutError } from 'e2b'

for (const v of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL']) {
  assert.ok(process.env[v], `${v} is set`)
}

const until = async (cond, what) => {
  for (let i = 0; i < 400; i++) {
    if (await cond()) return
    await new Promise((r) => setTimeout(r, 25))
  }
  assert.fail(`timed out waiting for ${what}`)
}

test('create, runCode keeps state, text of the last expression', async () => {
  const sbx = await Sandbox.create()
  try {
    assert.match(sbx.sandboxId, /\S/)
    await sbx.runCode('x = 1')
    const ex = await sbx.runCode('x += 1; x')
    assert.equal(ex.text, '2')
    assert.equal(ex.error, undefined)
    assert.ok(await sbx.isRunning())
  } finally {
    await sbx.kill()
  }
})

test('runCode: stdout and stderr stream to callbacks as they come; errors; a chart is a PNG', async () => {
  const sbx = await Sandbox.create()
  try {
    const seen = []
    const ex = await sbx.runCode('import sys, time\nprint("one", flush=True)\nprint("warn", file=sys.stderr, flush=True)\nprint("two")', {
      onStdout: (m) => seen.push(['out', m.line]),
      onStderr: (m) => seen.push(['err', m.line]),
    })
    assert.deepEqual(ex.logs.stdout.join(''), 'one\ntwo\n')
    assert.deepEqual(ex.logs.stderr.join(''), 'warn\n')
    assert.ok(seen.some(([k, l]) => k === 'out' && l.includes('one')), JSON.stringify(seen))
    assert.ok(seen.some(([k, l]) => k === 'err' && l.includes('warn')), JSON.stringify(seen))

    let onError
    const bad = await sbx.runCode('1/0', { onError: (e) => { onError = e } })
    assert.equal(bad.error.name, 'ZeroDivisionError')
    assert.match(bad.error.traceback, /ZeroDivisionError/)
    assert.equal(onError.name, 'ZeroDivisionError')

    const plot = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()')
    const png = plot.results.find((r) => r.png)
    assert.ok(png, JSON.stringify(plot.results.map((r) => r.formats())))
    assert.equal(Buffer.from(png.png, 'base64').subarray(1, 4).toString(), 'PNG')
  } finally {
    await sbx.kill()
  }
})

test('files: write, read, list, makeDir, rename, remove, exists, watch', async () => {
  const sbx = await Sandbox.create()
  try {
    const info = await sbx.files.write('/home/user/a.txt', 'hello')
    assert.equal(info.path, '/home/user/a.txt')
    assert.equal(await sbx.files.read('/home/user/a.txt'), 'hello')
    assert.equal(await sbx.files.read('a.txt'), 'hello')
    // The code sees the same file in its working directory.
    const ex = await sbx.runCode('open("a.txt").read()')
    assert.equal(ex.text, "'hello'")
    // Inside the sandbox /home/user is /workspace too: code written for
    // E2B opens its files there unchanged.
    const csv = await sbx.runCode('open("/home/user/data.csv", "w").write("a,b\\n1,2\\n")\nopen("/workspace/data.csv").read()')
    assert.equal(csv.error, undefined)
    assert.equal(csv.text, "'a,b\\n1,2\\n'")
    assert.equal(await sbx.files.read('/home/user/data.csv'), 'a,b\n1,2\n')
    await sbx.files.remove('/home/user/data.csv')

    assert.equal(await sbx.files.makeDir('/home/user/d/e'), true)
    assert.equal(await sbx.files.makeDir('/home/user/d/e'), false)
    const names = (await sbx.files.list('/home/user')).map((e) => `${e.name}:${e.type}`).sort()
    assert.deepEqual(names, ['a.txt:file', 'd:dir'])

    await sbx.files.rename('/home/user/a.txt', '/home/user/d/b.txt')
    assert.equal(await sbx.files.exists('/home/user/a.txt'), false)
    assert.equal(await sbx.files.read('/home/user/d/b.txt'), 'hello')
    await sbx.files.remove('/home/user/d')
    assert.equal(await sbx.files.exists('/home/user/d'), false)
    await assert.rejects(sbx.files.read('/home/user/missing.txt'), FileNotFoundError)

    const events = []
    const handle = await sbx.files.watchDir('/home/user', (e) => events.push(e))
    await sbx.files.write('/home/user/watched.txt', 'x')
    await until(() => events.some((e) => e.name === 'watched.txt' && e.type === 'create'), 'a create event')
    await handle.stop()

    const many = await sbx.files.write([{ path: '/home/user/m1.txt', data: '1' }, { path: '/home/user/m2.txt', data: '2' }])
    assert.deepEqual(many.map((f) => f.path).sort(), ['/home/user/m1.txt', '/home/user/m2.txt'])
  } finally {
    await sbx.kill()
  }
})

test('commands: run, non-zero exit, background, connect, stdin, kill, list', async () => {
  const sbx = await Sandbox.create()
  try {
    const r = await sbx.commands.run('echo hi; echo oops >&2')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'hi\n')
    assert.equal(r.stderr, 'oops\n')

    await assert.rejects(sbx.commands.run('exit 3'), (e) => e instanceof CommandExitError && e.exitCode === 3)

    const out = []
    const bg = await sbx.commands.run('echo started; sleep 300', { background: true, onStdout: (d) => out.push(d) })
    await until(() => out.join('').includes('started'), 'the background output')
    const listed = await sbx.commands.list()
    assert.ok(listed.some((p) => p.pid === bg.pid), JSON.stringify(listed))

    const again = await sbx.commands.connect(bg.pid)
    assert.equal(again.pid, bg.pid)
    assert.equal(await sbx.commands.kill(bg.pid), true)
    await assert.rejects(again.wait(), CommandExitError)
    assert.equal(await sbx.commands.kill(bg.pid), false)

    const cat = await sbx.commands.run('cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(cat.pid, 'piped\n')
    await sbx.commands.closeStdin(cat.pid)
    const done = await cat.wait()
    assert.equal(done.stdout, 'piped\n')

    const cwd = await sbx.commands.run('pwd; echo $GREETING', { cwd: '/home/user', envs: { GREETING: 'hey' } })
    assert.equal(cwd.stdout.split('\n')[1], 'hey')
  } finally {
    await sbx.kill()
  }
})

test('commands: the process model (cmd and args, envs, cwd, user, tag, stdin) and timeoutMs', async () => {
  const sbx = await Sandbox.create()
  try {
    // What commands.list says of a process is what its start sent.
    const bg = await sbx.commands.run('sleep 300', { background: true, cwd: '/tmp', envs: { K: 'v' }, timeoutMs: 0 })
    const entry = (await sbx.commands.list()).find((p) => p.pid === bg.pid)
    assert.deepEqual(entry, { pid: bg.pid, cmd: '/bin/bash', args: ['-l', '-c', 'sleep 300'], envs: { K: 'v' }, cwd: '/tmp' })
    await bg.kill()

    // envd's process API itself, through the SDK's own client: a program
    // and its arguments run as they are (no shell splits them), a tag
    // lists it and finds it again.
    const out = []
    const rpc = sbx.commands.rpc
    const events = rpc.start({ process: { cmd: 'printf', args: ['<%s>', 'a b', '$HOME', ''], envs: {} }, stdin: false })
    for await (const ev of events) {
      if (ev.event?.event.case === 'data') out.push(new TextDecoder().decode(ev.event.event.value.output.value))
      if (ev.event?.event.case === 'end') assert.equal(ev.event.event.value.exitCode, 0)
    }
    assert.equal(out.join(''), '<a b><$HOME><>')
    const tagged = rpc.start({ process: { cmd: '/bin/sleep', args: ['300'] }, tag: 'my-server' }, { timeoutMs: 0 })
    const first = await tagged[Symbol.asyncIterator]().next()
    const pid = first.value.event.event.value.pid
    const listed = (await sbx.commands.list()).find((p) => p.pid === pid)
    assert.equal(listed.tag, 'my-server')
    assert.deepEqual([listed.cmd, listed.args], ['/bin/sleep', ['300']])
    const byTag = rpc.connect({ process: { selector: { case: 'tag', value: 'my-server' } } }, { timeoutMs: 0 })
    const again = await byTag[Symbol.asyncIterator]().next()
    assert.equal(again.value.event.event.value.pid, pid)
    assert.equal(await sbx.commands.kill(pid), true)

    // stdin is /dev/null unless asked for: cat ends at once.
    assert.equal((await sbx.commands.run('cat')).stdout, '')
    // The sandbox has one user, "user"; root is refused, not pretended.
    assert.equal((await sbx.commands.run('id -u', { user: 'user' })).stdout, '1000\n')
    await assert.rejects(sbx.commands.run('id -u', { user: 'root' }), InvalidArgumentError)

    // timeoutMs is the command's own: the server kills it at that time,
    // with its process group, whoever is still following it.
    const slow = await sbx.commands.run('sleep 300 & sleep 300', { background: true, timeoutMs: 1500 })
    const follower = await sbx.commands.connect(slow.pid, { timeoutMs: 0 })
    const late = new Promise((_, reject) => setTimeout(() => reject(new Error('not killed within 30 s')), 30_000).unref())
    await assert.rejects(Promise.race([follower.wait(), late]), (e) => e instanceof CommandExitError && /timeoutMs/.test(e.error), 'the end says why')
    await until(async () => !(await sbx.commands.list()).some((p) => p.pid === slow.pid), 'the command to go')
    assert.equal((await sbx.commands.run('pgrep -c sleep || true')).stdout.trim(), '0')
    await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 500 }), (e) => e instanceof TimeoutError || e instanceof CommandExitError)
  } finally {
    await sbx.kill()
  }
})

test('setTimeout, getInfo, list by metadata, connect, kill twice', async () => {
  const sbx = await BaseSandbox.create({ metadata: { suite: 'e2b-sdk', n: '1' }, envs: { FROM_CREATE: 'yes' } })
  const other = await BaseSandbox.create({ metadata: { suite: 'other' } })
  try {
    await sbx.setTimeout(120_000)
    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.deepEqual(info.metadata, { suite: 'e2b-sdk', n: '1' })
    const left = info.endAt.getTime() - Date.now()
    assert.ok(left > 60_000 && left <= 121_000, `endAt in ${left} ms`)

    const page = await BaseSandbox.list({ query: { metadata: { suite: 'e2b-sdk' } } }).nextItems()
    assert.deepEqual(page.map((s) => s.sandboxId), [sbx.sandboxId])

    const same = await BaseSandbox.connect(sbx.sandboxId)
    assert.equal((await same.commands.run('echo $FROM_CREATE')).stdout, 'yes\n')
  } finally {
    assert.equal(await sbx.kill(), true)
    assert.equal(await BaseSandbox.kill(sbx.sandboxId), false)
    await other.kill()
  }
  await assert.rejects(BaseSandbox.connect(sbx.sandboxId), SandboxNotFoundError)
  await assert.rejects(sbx.commands.run('true'))
})

test('contexts: python, javascript and bash in one sandbox share its files, not their state; restart; envs', async () => {
  const sbx = await Sandbox.create()
  try {
    await sbx.runCode('open("sales.csv", "w").write("region,total\\nnorth,40\\n")\ny = 1')
    const js = await sbx.runCode('console.log(require("fs").readFileSync("sales.csv", "utf8").split("\\n")[1])', { language: 'js' })
    assert.equal(js.logs.stdout.join(''), 'north,40\n')
    const sh = await sbx.runCode('wc -l < sales.csv', { language: 'bash' })
    assert.equal(sh.logs.stdout.join('').trim(), '2')

    const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/home/user' })
    assert.equal(ctx.language, 'python')
    assert.equal(ctx.cwd, '/home/user')
    const fresh = await sbx.runCode('"y" in dir()', { context: ctx })
    assert.equal(fresh.text, 'False')
    await sbx.runCode('y = 5', { context: ctx })
    assert.equal((await sbx.runCode('y', { context: ctx })).text, '5')
    assert.equal((await sbx.runCode('y')).text, '1')
    assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
    await sbx.removeCodeContext(ctx)
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))

    // restartCodeContext: a fresh interpreter in the same context, with
    // its language and directory.
    await sbx.files.makeDir('/home/user/sub')
    const r = await sbx.createCodeContext({ language: 'python', cwd: '/home/user/sub' })
    await sbx.runCode('z = 7', { context: r })
    await sbx.restartCodeContext(r)
    const after = await sbx.runCode('import os; ("z" in dir(), os.path.basename(os.getcwd()))', { context: r })
    assert.equal(after.text, "(False, 'sub')")
    assert.ok((await sbx.listCodeContexts()).some((c) => c.id === r.id && c.cwd === '/home/user/sub'))

    // The default context restarts too (the SDK's restart of the
    // context it lists for python): its variables go, the files stay,
    // and code runs in it as before; javascript's default is untouched.
    await sbx.runCode('globalThis.kept = 9', { language: 'js' })
    const def = (await sbx.listCodeContexts()).find((c) => c.language === 'python' && c.id === 'python')
    assert.ok(def, 'the python default context is listed')
    await sbx.restartCodeContext(def)
    assert.equal((await sbx.runCode('"y" in dir()')).text, 'False')
    assert.equal((await sbx.runCode('open("sales.csv").read().count("\\n")')).text, '2')
    assert.equal((await sbx.runCode('console.log(globalThis.kept)', { language: 'js' })).logs.stdout.join(''), '9\n')
    await sbx.restartCodeContext('python')
    assert.equal((await sbx.runCode('1 + 1')).text, '2')

    // runCode's envs are that execution's alone, in every language.
    const once = { envs: { ONLY_ONCE: 'yes' } }
    assert.equal((await sbx.runCode('import os; os.environ.get("ONLY_ONCE")', once)).text, "'yes'")
    assert.equal((await sbx.runCode('import os; repr(os.environ.get("ONLY_ONCE"))')).text, "'None'")
    assert.equal((await sbx.runCode('console.log(process.env.ONLY_ONCE)', { language: 'js', ...once })).logs.stdout.join(''), 'yes\n')
    assert.equal((await sbx.runCode('console.log(process.env.ONLY_ONCE ?? "unset")', { language: 'js' })).logs.stdout.join(''), 'unset\n')
    assert.equal((await sbx.runCode('echo $ONLY_ONCE', { language: 'bash', ...once })).logs.stdout.join(''), 'yes\n')
    assert.equal((await sbx.runCode('echo ${ONLY_ONCE-unset}', { language: 'bash' })).logs.stdout.join(''), 'unset\n')
  } finally {
    await sbx.kill()
  }
})

// get sends a GET to the server with another Host (the DNS name
// getHost answers would lead there).
const get = (host, headers) => new Promise((resolve, reject) => {
  const u = new URL(process.env.E2B_API_URL)
  const req = http.get({ host: u.hostname, port: u.port, path: '/hello.txt', headers: { Host: host, ...headers } }, (res) => {
    let body = ''
    res.on('data', (d) => { body += d })
    res.on('end', () => resolve({ status: res.statusCode, body }))
  })
  req.on('error', reject)
})

test('getHost: an HTTP server inside, reached from outside with the traffic token', async () => {
  const sbx = await Sandbox.create()
  try {
    await sbx.files.write('/home/user/hello.txt', 'served from inside')
    await sbx.commands.run('python3 -m http.server 8000 --bind 127.0.0.1', { background: true })
    const host = sbx.getHost(8000)
    assert.match(host, /^8000-.+\.e2b-ports\.test$/)
    let res
    await until(async () => {
      res = await get(host, { 'E2B-Traffic-Access-Token': sbx.trafficAccessToken })
      return res.status === 200
    }, 'the server inside to answer')
    assert.equal(res.body, 'served from inside')
    assert.equal((await get(host, {})).status, 401)
    assert.equal((await get(host, { 'E2B-Traffic-Access-Token': 'nope' })).status, 401)
  } finally {
    await sbx.kill()
  }
})

test('pty: a terminal that is resized, typed into, and exits', async () => {
  const sbx = await Sandbox.create()
  try {
    let out = ''
    const dec = new TextDecoder()
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d) } })
    await sbx.pty.resize(term.pid, { cols: 100, rows: 30 })
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; exit\n'))
    const res = await term.wait()
    assert.equal(res.exitCode, 0)
    assert.match(out, /30 100/)
  } finally {
    await sbx.kill()
  }
})
