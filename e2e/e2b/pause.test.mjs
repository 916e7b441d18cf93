// E2B's pause and resume through its official JS SDK, on a server with
// persistence.enabled: betaPause, Sandbox.connect (which resumes), list
// by state, and lifecycle {onTimeout: 'pause', autoResume}; a pause with
// keepMemory false is not auto-resumed (as E2B's API). A pause keeps
// the sandbox's files (the interpreter restarts). Run by e2e/e2b_test.go.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

const until = async (cond, what) => {
  for (let i = 0; i < 800; i++) {
    if (await cond()) return
    await new Promise((r) => setTimeout(r, 25))
  }
  assert.fail(`timed out waiting for ${what}`)
}

const state = async (id) => {
  const all = await Sandbox.list({ query: { metadata: { suite: 'pause' } } }).nextItems()
  return all.find((s) => s.sandboxId === id)?.state
}

test('betaPause keeps the files; list says paused; connect resumes', async () => {
  const sbx = await Sandbox.create({ metadata: { suite: 'pause' } })
  try {
    await sbx.runCode('open("/home/user/kept.txt", "w").write("from code")')
    await sbx.files.write('/home/user/data/up.txt', 'uploaded')
    assert.equal(await sbx.betaPause(), true)
    assert.equal(await Sandbox.betaPause(sbx.sandboxId), false) // paused already
    assert.equal(await state(sbx.sandboxId), 'paused')
    const paused = await Sandbox.list({ query: { state: ['paused'], metadata: { suite: 'pause' } } }).nextItems()
    assert.deepEqual(paused.map((s) => s.sandboxId), [sbx.sandboxId])
    const running = await Sandbox.list({ query: { state: ['running'], metadata: { suite: 'pause' } } }).nextItems()
    assert.deepEqual(running, [])
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
    // Without autoResume the data plane does not resume it.
    await assert.rejects(sbx.files.read('/home/user/kept.txt'))

    const back = await Sandbox.connect(sbx.sandboxId)
    assert.equal(await state(sbx.sandboxId), 'running')
    assert.equal(await back.files.read('/home/user/kept.txt'), 'from code')
    const ex = await back.runCode('open("/workspace/data/up.txt").read()')
    assert.equal(ex.text, "'uploaded'")
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})

test('lifecycle onTimeout pause: the timeout pauses, autoResume resumes', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 2_000, metadata: { suite: 'pause' }, lifecycle: { onTimeout: 'pause', autoResume: true } })
  try {
    const info = await sbx.getInfo()
    assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: true })
    await sbx.files.write('/home/user/notes.txt', 'survives the timeout')
    await until(async () => (await state(sbx.sandboxId)) === 'paused', 'the timeout to pause the sandbox')
    // A data-plane call resumes it.
    assert.equal(await sbx.files.read('/home/user/notes.txt'), 'survives the timeout')
    assert.equal(await state(sbx.sandboxId), 'running')
    await sbx.setTimeout(60_000)
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})

test('autoResume: the resumed sandbox says its new timeout', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 60_000, metadata: { suite: 'pause' }, lifecycle: { onTimeout: 'pause', autoResume: true } })
  try {
    const before = (await sbx.getInfo()).endAt
    assert.equal(await sbx.betaPause(), true)
    await sbx.files.write('/home/user/x.txt', 'resumes it')
    assert.equal(await state(sbx.sandboxId), 'running')
    // Its timeout started again when traffic resumed it (the session's
    // lifetime), later than the one it was created with.
    const after = (await sbx.getInfo()).endAt
    assert.ok(after > before, `endAt ${after.toISOString()} after the resume, ${before.toISOString()} before`)
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})

test('keepMemory false: autoResume refuses the sandbox, connect resumes it', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 60_000, metadata: { suite: 'pause' }, lifecycle: { onTimeout: 'pause', autoResume: true } })
  try {
    await sbx.files.write('/home/user/notes.txt', 'kept')
    assert.equal(await sbx.pause({ keepMemory: false }), true)
    // As E2B's API: traffic does not resume a filesystem-only pause.
    await assert.rejects(sbx.files.read('/home/user/notes.txt'))
    assert.equal(await state(sbx.sandboxId), 'paused')
    const back = await Sandbox.connect(sbx.sandboxId)
    assert.equal(await back.files.read('/home/user/notes.txt'), 'kept')
    // Paused again by default, traffic resumes it again.
    assert.equal(await back.pause(), true)
    assert.equal(await back.files.read('/home/user/notes.txt'), 'kept')
    assert.equal(await state(sbx.sandboxId), 'running')
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})

test('a sandbox that is killed while paused is gone', async () => {
  const sbx = await Sandbox.create({ metadata: { suite: 'pause' } })
  await sbx.betaPause()
  assert.equal(await Sandbox.kill(sbx.sandboxId), true)
  assert.equal(await state(sbx.sandboxId), undefined)
  await assert.rejects(Sandbox.connect(sbx.sandboxId))
})
