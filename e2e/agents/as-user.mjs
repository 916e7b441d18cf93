// Runs a command as another user (uid and gid from AS_UID), relaying stdio,
// signals and the exit status: how the tests start `airlock mcp --url` as
// the unprivileged user a desktop client runs as.
import { spawn } from 'node:child_process';

const id = Number(process.env.AS_UID ?? 65534);
const [command, ...args] = process.argv.slice(2);
const env = { ...process.env };
delete env.AS_UID;
const child = spawn(command, args, { uid: id, gid: id, stdio: 'inherit', env, cwd: '/' });
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => child.kill(sig));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 128 : 1)));
