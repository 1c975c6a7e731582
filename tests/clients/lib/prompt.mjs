// Reading a Messages request the way prompt caching reads it: tools → system → messages, one
// block after another. Used to check that memgate's injection keeps every client block and every
// cache breakpoint where the client put it, and puts the memory after the last breakpoint.

export const MEMORY_OPEN = '<MEMORY_CONTEXT';
export const MEMORY_CLOSE = '</MEMORY_CONTEXT>';

/**
 * The request's blocks in cache-prefix order, each `{path, block}`: `tools.N`, `system.N` (or
 * `system` for a string system prompt), `messages.N.content.M` (or `messages.N.content` for a
 * string content). A string is shown as a text block with no breakpoint.
 */
export function promptBlocks(body) {
  const out = [];
  (body.tools ?? []).forEach((tool, i) => out.push({ path: `tools.${i}`, block: tool }));
  if (typeof body.system === 'string') out.push({ path: 'system', block: { type: 'text', text: body.system } });
  else (body.system ?? []).forEach((block, i) => out.push({ path: `system.${i}`, block }));
  (body.messages ?? []).forEach((message, i) => {
    if (typeof message.content === 'string') {
      out.push({ path: `messages.${i}.content`, role: message.role, block: { type: 'text', text: message.content } });
    } else {
      (message.content ?? []).forEach((block, j) => out.push({ path: `messages.${i}.content.${j}`, role: message.role, block }));
    }
  });
  return out;
}

/** Whether a block (or a block nested in it, as in tool_result) carries a cache breakpoint. */
function hasBreakpoint(block) {
  if (block?.cache_control) return true;
  return Array.isArray(block?.content) && block.content.some(hasBreakpoint);
}

/** The positions (indexes into promptBlocks) that hold a breakpoint, with their paths. */
export function breakpoints(body) {
  return promptBlocks(body)
    .map((entry, index) => ({ ...entry, index }))
    .filter((entry) => hasBreakpoint(entry.block));
}

/**
 * The blocks that are a `<MEMORY_CONTEXT` block (with their positions): memgate's block is a text
 * block of its own that starts with the tag. (Text that merely quotes one — the mock's answer
 * echoes the last user text, which Claude Code then sends back as history — is not one.)
 */
export function memoryBlocks(body) {
  return promptBlocks(body)
    .map((entry, index) => ({ ...entry, index }))
    .filter((entry) => typeof entry.block?.text === 'string' && entry.block.text.startsWith(MEMORY_OPEN));
}

/** The record lines (one JSON object per line) of a rendered memory block. */
export function recordLines(text) {
  const start = text.indexOf(MEMORY_OPEN);
  const end = text.indexOf(MEMORY_CLOSE);
  return text.slice(start, end === -1 ? undefined : end).split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line));
}

/** A deep copy of `body` without the block at `path` (a path from promptBlocks). */
export function withoutBlock(body, path) {
  const copy = structuredClone(body);
  const parts = path.split('.');
  if (parts[0] === 'system' && parts.length === 2) copy.system.splice(Number(parts[1]), 1);
  else if (parts[0] === 'messages' && parts.length === 4) copy.messages[Number(parts[1])].content.splice(Number(parts[3]), 1);
  else if (parts[0] === 'messages' && parts.length === 3) copy.messages.splice(Number(parts[1]), 1);
  else throw new Error(`cannot remove the block at ${path}`);
  return copy;
}

/**
 * The first place where two JSON values differ, as `{path, left, right}` with short excerpts,
 * or null when they are equal (object key order ignored; string bytes compared exactly).
 */
export function firstDifference(left, right, path = '') {
  const excerpt = (value) => {
    const text = JSON.stringify(value);
    return text === undefined ? 'undefined' : text.length > 300 ? `${text.slice(0, 300)}… (${text.length} chars)` : text;
  };
  const here = path || '(body)';
  if (Array.isArray(left) && Array.isArray(right)) {
    for (let i = 0; i < Math.max(left.length, right.length); i += 1) {
      if (i >= left.length || i >= right.length) return { path: `${path}${path ? '.' : ''}${i}`, left: excerpt(left[i]), right: excerpt(right[i]) };
      const diff = firstDifference(left[i], right[i], `${path}${path ? '.' : ''}${i}`);
      if (diff) return diff;
    }
    return null;
  }
  if (left && right && typeof left === 'object' && typeof right === 'object' && !Array.isArray(left) && !Array.isArray(right)) {
    const keys = new Set([...Object.keys(left), ...Object.keys(right)]);
    for (const key of keys) {
      const diff = firstDifference(left[key], right[key], `${path}${path ? '.' : ''}${key}`);
      if (diff) return diff;
    }
    return null;
  }
  return Object.is(left, right) ? null : { path: here, left: excerpt(left), right: excerpt(right) };
}

/** A one-line picture of a request's blocks: `path[type,len,BP]`, for failure messages. */
export function outline(body) {
  return promptBlocks(body).filter((e) => !e.path.startsWith('tools.')).map(({ path, role, block }) => {
    const size = typeof block.text === 'string' ? block.text.length : JSON.stringify(block).length;
    return `${path}${role ? `(${role})` : ''}[${block.type},${size}${hasBreakpoint(block) ? ',BP' : ''}]`;
  }).join(' ') + ` + ${body.tools?.length ?? 0} tools`;
}
