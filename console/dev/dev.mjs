#!/usr/bin/env node
// `npm run dev`: the mock admin API (dev/mock-api.mjs, port 8788) and Vite's dev server (port
// 5173, the console at http://127.0.0.1:5173/console/, the API forwarded to the mock). With
// MEMGATE_URL set, no mock is started and Vite forwards to that memgate instead.

import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const children = [];
const start = (cmd, args) => {
  const child = spawn(cmd, args, { stdio: 'inherit', cwd: path.join(here, '..') });
  child.on('exit', (code) => {
    for (const other of children) if (other !== child && other.exitCode === null) other.kill('SIGTERM');
    process.exitCode = code ?? 0;
  });
  children.push(child);
};

if (!process.env.MEMGATE_URL) start(process.execPath, [path.join(here, 'mock-api.mjs')]);
start(process.execPath, [path.join(here, '..', 'node_modules', 'vite', 'bin', 'vite.js')]);
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => children.forEach((c) => c.kill('SIGTERM')));
