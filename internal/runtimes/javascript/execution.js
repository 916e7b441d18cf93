'use strict';
/*
 * Executions: one cell compiled (transform.js) and run in the runtime's
 * realm, its promise awaited, and its outcome sent as result, error and
 * done (docs/runtime-protocol.md; the model is in runtime.js).
 */

const current = require('./current');
const { formatValue } = require('./display');
const { INTERRUPT, exitCodeOf } = require('./interrupts');
const { compileCell } = require('./transform');
const { describeError, rememberCell } = require('./tracebacks');
const { send, writeErr } = require('./wire');
const { HostPromise, promiseRace, hostSetImmediate, isPromise } = require('./primordials');

const { safeString } = current;

let executionCount = 0;

const tick = () => new HostPromise((resolve) => hostSetImmediate(resolve));

/**
 * Runs one cell; returns {kind: 'ok', value, hasValue} | {kind: 'error', err,
 * syntax} | {kind: 'exit', code, err} | {kind: 'interrupt', awaiting}.
 */
async function runCell(cur, code) {
  let compiled;
  try {
    compiled = compileCell(code, cur.count);
  } catch (err) {
    return { kind: 'error', err, syntax: true };
  }
  let value;
  try {
    value = compiled.script.runInThisContext({ breakOnSigint: true, displayErrors: false });
  } catch (err) {
    return outcomeOf(err, false);
  }
  const wantValue = compiled.lastIsExpr;
  // From here on the execution waits: SIGINT and errors thrown by callbacks end it.
  cur.async = true;
  const aborted = new HostPromise((_, reject) => { cur.abort = reject; });
  aborted.catch(() => {});
  try {
    if (isPromise(value) && (wantValue || compiled.async)) {
      cur.awaiting = true;
      value = await promiseRace([value, aborted]);
      cur.awaiting = false;
    }
    // One turn of the event loop: let what the cell started synchronously
    // report (unhandled rejections, process.nextTick callbacks).
    await promiseRace([tick(), aborted]);
  } catch (err) {
    return outcomeOf(err, cur.awaiting);
  }
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

async function execute(id, code) {
  const count = ++executionCount;
  const cur = { id, count, async: false, awaiting: false, failure: undefined, abort: null };
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
