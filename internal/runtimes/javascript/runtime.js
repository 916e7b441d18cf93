'use strict';
/*
 * airlock's JavaScript session runtime: the persistent Node.js interpreter of
 * a session. The server starts it inside the sandbox as
 *
 *     node /opt/airlock/javascript/runtime.js
 *
 * and the contract is docs/runtime-protocol.md:
 *
 *   - fd 3 is the control socket: frames of a 4-byte big-endian length and
 *     UTF-8 JSON. The server sends configure, execute, run and shutdown; the
 *     runtime sends hello once, then per execution any number of display,
 *     at most one result, at most one error and exactly one done, last. A
 *     malformed frame makes the runtime exit 2.
 *   - fds 1 and 2 are the execution's stdout and stderr. process.stdout and
 *     process.stderr (and so console.*) are replaced by streams that write
 *     to them synchronously, so every byte an execution wrote is in the pipe
 *     before its done is sent. Frames on fd 3 are written synchronously too.
 *
 * Node.js's standard library and acorn, vendored in acorn/ (the parser
 * Node's own REPL uses for the same job); works on Node 18 and 20. The
 * runtime is split by role, each file requiring only those below it:
 *
 *   runtime.js      this: the model, and main(), which puts it together
 *   session.js      the protocol loop: configure, execute, run, shutdown
 *   program.js      program mode: `node FILE ARGS`, then exit
 *   execution.js    one cell: compiled, run, awaited, its outcome sent
 *   interrupts.js   SIGINT, process.exit() and callbacks' errors
 *   transform.js    the cell transform (declarations, imports, await)
 *   acorn/          the JavaScript parser the transform reads cells with
 *   globals.js      require, module, import() & co. for cells
 *   tracebacks.js   errors without the runtime's frames
 *   display.js      MIME bundles and display()
 *   wire.js         fds 1 and 2 written synchronously; frames on fd 3
 *   current.js      what they share: the running execution, cell names
 *   primordials.js  the built-ins the runtime uses, taken before any cell
 *
 * Execution model (the decisions a notebook needs, documented here once):
 *
 *   - One context: cells run with vm.Script#runInThisContext, i.e. in the
 *     runtime's own realm, as the `node` REPL does. A separate vm context
 *     would make every object that Node's modules return belong to another
 *     realm (`fs.readdirSync('.') instanceof Array`, `err instanceof Error`
 *     and `Buffer.from('x') instanceof Uint8Array` would all be false) and
 *     would run require()d modules against other globals than the cell's.
 *     All of Node's globals (console, timers, setImmediate, queueMicrotask,
 *     URL, TextEncoder/Decoder, Buffer, process, structuredClone, fetch when
 *     Node has it, ...) are therefore there as usual; the runtime adds
 *     require (resolving from the current directory), module, exports,
 *     __filename ('[eval]') and __dirname ('.') like `node -e`, and display.
 *     The runtime keeps its own references to everything it uses, so a cell
 *     that replaces globals (JSON, Promise, console, ...) cannot break the
 *     protocol.
 *
 *   - Declarations persist and can be redeclared, like in a notebook: before
 *     compiling, the transform (transform.js) rewrites the cell's top-level
 *     `let` and `const` to `var` (a `let x` without initializer becomes
 *     `var x = void 0`, so re-running it resets x) and a top-level
 *     `class C {}` to `var C = class C {};`. Top-level functions are already
 *     var-like. Consequences: top-level const bindings can be reassigned by
 *     later code, there is no temporal dead zone at the top level, and
 *     top-level declarations become properties of globalThis (as `var`
 *     does). Within one cell a name declared twice with let, const or class
 *     is a SyntaxError, as in JavaScript.
 *     Declarations inside blocks and functions are untouched.
 *     Static `import x from 'm'` / `import {a as b} from 'm'` /
 *     `import * as ns from 'm'` become require() calls, `export` keywords
 *     are dropped, and `import(...)` resolves from the current directory.
 *
 *   - Top-level await: a cell that awaits outside any function is wrapped
 *     as `(async () => { ... })()`; its top-level declarations (var, let,
 *     const, class, function, import) are hoisted out of the wrapper as
 *     globals first, so they persist as well (a `var` nested in a block or
 *     loop header of such a cell stays local to it). If acorn cannot parse
 *     a cell (syntax newer than it knows) or V8 refuses its rewrite, the
 *     cell is compiled as written, so valid code still runs, only without
 *     these conveniences, and invalid code gets V8's own SyntaxError.
 *
 *   - The result is the value of the cell's final expression statement (none
 *     if the last statement is not an expression, or the value is
 *     undefined), formatted with util.inspect (depth 4, no colours), plus
 *     text/html & co. when the value has _repr_html_()/toHTML() or other
 *     _repr_*_ methods. A Promise result is awaited. A cell that is a single
 *     object literal (`{a: 1}`) is an expression, as in the node REPL.
 *
 *   - Errors: an uncaught exception (thrown, or rejecting the awaited
 *     promise) is sent as error {name, value, traceback} with the runtime's
 *     frames removed and the failing line of the cell shown on top, done
 *     has status error and exit_code 1. An exception thrown by a callback
 *     (timer, event, unhandled rejection) while the execution is still
 *     awaiting ends that execution the same way; when no execution runs, it
 *     is printed to stderr and the session goes on.
 *
 *   - process.exit(n) in user code does not end the runtime: it throws a
 *     SystemExit error that ends the execution. n == 0 is a clean stop
 *     (status ok, no error, like Python's sys.exit(0)); otherwise an error
 *     named SystemExit is sent and done has status error with exit_code
 *     n & 0xff (or 1 when that is 0). Code can catch it, as Python code can
 *     catch SystemExit. process.exit() while no execution runs is ignored.
 *
 *   - Interrupts: the server sends an interrupt message for the execution,
 *     then SIGINT to the process group. SIGINT during synchronous code
 *     stops it (vm's breakOnSigint); during a pending await the runtime
 *     stops waiting (the abandoned promise's work may go on in the
 *     background). Either way an error KeyboardInterrupt is sent, done has
 *     status interrupted and exit_code 1, and the state is kept. A SIGINT
 *     that ends the synchronous part from outside (execSync's child killed
 *     by it) before Node's watchdog breaks the run off is told apart by the
 *     message, which the runtime reads before it reports the execution. A
 *     message for an execution still queued refuses it as interrupted; one
 *     for an execution that has ended, and a SIGINT while idle, change
 *     nothing. SIGINT alone (no message) interrupts as well.
 *     SIGINT belongs to Node's SIGINT watchdog thread for the runtime's
 *     whole life (interrupts.js says why), never to a listener, so it
 *     never finds the default action that would kill the runtime; a cell's
 *     process.on('SIGINT') listeners are kept but never called. Node's
 *     limit: code that runs in a callback or a promise continuation (after
 *     the cell's first await) is not under breakOnSigint, so a busy loop
 *     there cannot be interrupted (the server ends the session after its
 *     grace period).
 */

const display = require('./display');
const globals = require('./globals');
const interrupts = require('./interrupts');
const session = require('./session');
const transform = require('./transform');
const wire = require('./wire');
const { proc } = require('./primordials');

const LANGUAGE = 'javascript';

function main() {
  wire.installStdio();
  globals.install(display.display);
  interrupts.install();
  transform.warmUp();
  wire.readFrames(session.dispatch);
  wire.send({ type: 'hello', language: LANGUAGE, version: proc.versions.node, pid: proc.pid });
}

main();
