'use strict';
/*
 * Executions: one cell compiled (transform.js) and run in the runtime's
 * realm, its promise awaited, and its outcome sent as result, error and
 * done (docs/runtime-protocol.md; the model is in runtime.js).
 */

const vm = require('vm');
const crypto = require('crypto');
const path = require('path');
const current = require('./current');
const { formatValue } = require('./display');
const {
  INTERRUPT, exitCodeOf, interrupt, brokeOff, takeSigint, settle, watchdogKept,
} = require('./interrupts');
const { compileCell } = require('./transform');
const { describeError, rememberCell } = require('./tracebacks');
const { send, writeErr } = require('./wire');
const {
  HostPromise, promiseRace, hostSetImmediate, hostSetInterval, hostClearInterval, isPromise, ObjectDefineProperty,
} = require('./primordials');

const { safeString } = current;

let executionCount = 0;

const tick = () => new HostPromise((resolve) => hostSetImmediate(resolve));
// A whole turn of the event loop, its poll included: what the server sent
// before now has been read by its end (an immediate set in the poll phase
// runs before the next poll).
const turn = async () => { await tick(); await tick(); };

// How often an awaiting execution looks for a SIGINT the watchdog noted.
const SIGINT_POLL_MS = 10;

// A cell's synchronous part runs inside runner, a breakOnSigint run that
// first looks for an interrupt that came before it: once the run has
// started, SIGINT breaks it off; before, the watchdog notes it. Looking
// before the run instead would leave a gap between the look and the run.
// The runner calls the function the runtime puts under RUN_KEY for it; its
// frame is the runtime's (tracebacks drop it).
const RUN_KEY = `__airlock_run_${crypto.randomBytes(8).toString('hex')}`;
const runner = new vm.Script(`globalThis[${JSON.stringify(RUN_KEY)}]()`, {
  filename: path.join(current.RUNTIME_DIR, 'runner.js'),
});

/** Runs script's synchronous part under breakOnSigint; throws INTERRUPT for an earlier interrupt. */
function runSync(cur, script) {
  if (!watchdogKept()) return script.runInThisContext({ breakOnSigint: true, displayErrors: false });
  let value;
  ObjectDefineProperty(globalThis, RUN_KEY, {
    configurable: true,
    value: () => {
      delete globalThis[RUN_KEY];
      if (cur.interrupted || takeSigint()) throw INTERRUPT;
      value = script.runInThisContext({ displayErrors: false });
    },
  });
  try {
    runner.runInThisContext({ breakOnSigint: true, displayErrors: false });
  } finally {
    delete globalThis[RUN_KEY];
  }
  return value;
}

/**
 * Runs one cell; returns {kind: 'ok', value, hasValue} | {kind: 'error', err,
 * syntax} | {kind: 'exit', code, err} | {kind: 'interrupt', awaiting}.
 */
async function runCell(cur, code) {
  if (cur.interrupted) return { kind: 'interrupt', awaiting: false }; // before it started
  let compiled;
  try {
    compiled = compileCell(code, cur.count);
  } catch (err) {
    return { kind: 'error', err, syntax: true };
  }
  let value;
  let thrown;
  try {
    value = runSync(cur, compiled.script);
  } catch (err) {
    const outcome = outcomeOf(err, false);
    if (outcome.kind === 'interrupt') {
      if (err !== INTERRUPT) brokeOff();
      return outcome;
    }
    thrown = outcome;
  }
  const wantValue = compiled.lastIsExpr;
  // From here on the execution waits: interrupts and errors thrown by
  // callbacks end it. Even one whose synchronous part threw waits a turn
  // of the event loop, for the server's interrupt message that came with
  // a SIGINT that ended it from outside (execSync's child killed by it,
  // which can end the run before the watchdog's thread breaks it off).
  cur.async = true;
  const aborted = new HostPromise((_, reject) => { cur.abort = reject; });
  aborted.catch(() => {});
  const poll = hostSetInterval(() => { if (takeSigint()) interrupt(cur); }, SIGINT_POLL_MS);
  if (cur.interrupted || takeSigint()) interrupt(cur);
  try {
    if (thrown === undefined && isPromise(value) && (wantValue || compiled.async)) {
      cur.awaiting = true;
      value = await promiseRace([value, aborted]);
      cur.awaiting = false;
    }
    // A turn of the event loop: let what the cell started synchronously
    // report (unhandled rejections, process.nextTick callbacks), and the
    // server's messages be read.
    await promiseRace([turn(), aborted]);
  } catch (err) {
    if (thrown === undefined) return outcomeOf(err, cur.awaiting);
  } finally {
    hostClearInterval(poll);
  }
  if (cur.interrupted) return { kind: 'interrupt', awaiting: false };
  if (thrown !== undefined) return thrown;
  if (cur.failure !== undefined) return outcomeOf(cur.failure, false);
  return { kind: 'ok', value, hasValue: wantValue && value !== undefined };
}

function outcomeOf(err, awaiting) {
  if (err === INTERRUPT || (err !== null && typeof err === 'object' && safeString(() => err.code, '') === 'ERR_SCRIPT_EXECUTION_INTERRUPTED')) {
    return { kind: 'interrupt', awaiting };
  }
  const code = exitCodeOf(err);
  if (code !== undefined) return { kind: 'exit', code, err };
  return { kind: 'error', err, syntax: false };
}

/**
 * Runs execution id; interrupted: the server interrupted it before it
 * started (it is refused as interrupted).
 */
async function execute(id, code, interrupted) {
  const count = ++executionCount;
  await settle(); // SIGINTs of earlier executions are taken; one while idle is no one's
  const cur = { id, count, async: false, awaiting: false, failure: undefined, abort: null, interrupted: interrupted === true };
  current.execution = cur;
  rememberCell(count, code);
  let outcome;
  try {
    outcome = await runCell(cur, code);
  } catch (err) {
    outcome = { kind: 'error', err, syntax: false };
  }
  const msgs = [];
  let status = 'ok';
  let exitCode = 0;
  try {
    switch (outcome.kind) {
      case 'ok':
        if (outcome.hasValue) {
          try {
            msgs.push({ type: 'result', id, data: formatValue(outcome.value), metadata: {}, execution_count: count });
          } catch (err) {
            msgs.push({ type: 'error', id, ...describeError(err, false) });
            status = 'error';
            exitCode = 1;
          }
        }
        break;
      case 'error':
        msgs.push({ type: 'error', id, ...describeError(outcome.err, outcome.syntax) });
        status = 'error';
        exitCode = 1;
        break;
      case 'exit':
        if (outcome.code !== 0) {
          msgs.push({ type: 'error', id, ...describeError(outcome.err, false) });
          status = 'error';
          exitCode = outcome.code;
        }
        break;
      case 'interrupt': {
        const tb = ['KeyboardInterrupt'];
        if (outcome.awaiting) tb.push('(interrupted while awaiting a promise; work it started may still be running)');
        msgs.push({ type: 'error', id, name: 'KeyboardInterrupt', value: '', traceback: tb });
        status = 'interrupted';
        exitCode = 1;
        break;
      }
    }
  } catch (err) {
    writeErr(`airlock runtime: internal error: ${safeString(() => err.message, '?')}\n`);
    msgs.length = 0;
    msgs.push({ type: 'error', id, name: 'InternalError', value: 'airlock runtime error', traceback: [] });
    status = 'error';
    exitCode = 1;
  }
  current.execution = null;
  for (const m of msgs) send(m);
  send({ type: 'done', id, status, execution_count: count, exit_code: exitCode });
}

module.exports = { execute };
