// E2B's pause with memory through its official JS SDK, on a gVisor server
// with persistence.enabled (whose pauses keep memory by default):
// keepMemory in create's lifecycle and in pause is accepted, and a resumed
// sandbox's interpreter still has its variables; keepMemory false (pause,
// lifecycle) pauses with the files only: connect brings the files back,
// the interpreter restarted. Run by e2e/e2b_test.go.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

test('keepMemory: a paused sandbox comes back with its variables', async () => {
  const sbx = await Sandbox.create({ metadata: { suite: 'memory' }, lifecycle: { onTimeout: { action: 'pause', keepMemory: true } } })
  try {
    await sbx.runCode('x = 41\nopen("/home/user/kept.txt", "w").write("from code")')
    assert.equal(await sbx.pause({ keepMemory: true }), true)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
    const back = await Sandbox.connect(sbx.sandboxId)
    const ex = await back.runCode('x + 1')
    assert.equal(ex.error, undefined)
    assert.equal(ex.text, '42')
    assert.equal(await back.files.read('/home/user/kept.txt'), 'from code')
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})

test('keepMemory false: a files-only pause keeps the files, not the variables', async () => {
  const sbx = await Sandbox.create({ metadata: { suite: 'memory' } })
  try {
    await sbx.runCode('x = 41\nopen("/home/user/kept.txt", "w").write("from code")')
    assert.equal(await sbx.pause({ keepMemory: false }), true)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
    const back = await Sandbox.connect(sbx.sandboxId)
    const ex = await back.runCode('x')
    assert.equal(ex.error?.name, 'NameError')
    assert.equal(await back.files.read('/home/user/kept.txt'), 'from code')
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})

test('lifecycle keepMemory false: the timeout pauses with the files only', async () => {
  const sbx = await Sandbox.create({ metadata: { suite: 'memory' }, timeoutMs: 3000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
  try {
    await sbx.runCode('x = 41\nopen("/home/user/kept.txt", "w").write("from code")')
    const deadline = Date.now() + 60000
    while ((await Sandbox.getInfo(sbx.sandboxId)).state !== 'paused') {
      assert.ok(Date.now() < deadline, 'the sandbox never paused on its timeout')
      await new Promise((r) => setTimeout(r, 200))
    }
    const back = await Sandbox.connect(sbx.sandboxId)
    const ex = await back.runCode('x')
    assert.equal(ex.error?.name, 'NameError')
    assert.equal(await back.files.read('/home/user/kept.txt'), 'from code')
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})
