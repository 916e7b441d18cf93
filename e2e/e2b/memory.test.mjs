// E2B's pause with memory through its official JS SDK, on a gVisor server
// with persistence.enabled (whose pauses keep memory by default):
// keepMemory in create's lifecycle and in pause is accepted, and a resumed
// sandbox's interpreter still has its variables; keepMemory false (pause,
// lifecycle) pauses with the files only, and connect's onResume 'reboot'
// resumes a memory pause with the files only: the files come back, the
// interpreter restarted. Run by e2e/e2b_test.go.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

// pausedAndBack makes a sandbox with opts, sets x and writes a file in
// it, has pause(sbx) pause it, connects to it with connectOpts and
// returns what `x + 1` gives there and the file read back.
async function pausedAndBack (opts, pause, connectOpts) {
  const sbx = await Sandbox.create({ metadata: { suite: 'memory' }, ...opts })
  try {
    await sbx.runCode('x = 41\nopen("/home/user/kept.txt", "w").write("from code")')
    await pause(sbx)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
    const back = await Sandbox.connect(sbx.sandboxId, connectOpts)
    return { ex: await back.runCode('x + 1'), file: await back.files.read('/home/user/kept.txt') }
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
}

// filesOnly checks what pausedAndBack saw of a sandbox back with its
// files alone: the file, and x gone.
function filesOnly ({ ex, file }) {
  assert.equal(ex.error?.name, 'NameError')
  assert.equal(file, 'from code')
}

test('keepMemory: a paused sandbox comes back with its variables', async () => {
  const { ex, file } = await pausedAndBack({ lifecycle: { onTimeout: { action: 'pause', keepMemory: true } } },
    async (sbx) => assert.equal(await sbx.pause({ keepMemory: true }), true))
  assert.equal(ex.error, undefined)
  assert.equal(ex.text, '42')
  assert.equal(file, 'from code')
})

test('keepMemory false: a files-only pause keeps the files, not the variables', async () => {
  filesOnly(await pausedAndBack({}, async (sbx) => assert.equal(await sbx.pause({ keepMemory: false }), true)))
})

test("onResume 'reboot': a memory pause resumed with its files only", async () => {
  filesOnly(await pausedAndBack({}, async (sbx) => assert.equal(await sbx.pause(), true), { onResume: 'reboot' }))
})

test('lifecycle keepMemory false: the timeout pauses with the files only', async () => {
  filesOnly(await pausedAndBack({ timeoutMs: 3000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } }, async (sbx) => {
    const deadline = Date.now() + 60000
    while ((await Sandbox.getInfo(sbx.sandboxId)).state !== 'paused') {
      assert.ok(Date.now() < deadline, 'the sandbox never paused on its timeout')
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
  }))
})
