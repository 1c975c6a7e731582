import { defineConfig } from 'vite';

// The console is served by memgate at /console/ from files embedded in the binary, so the build
// uses relative URLs (base './') and emits no inline script or style (CSP: script-src 'self').
// In development, `npm run dev` serves it at /console/ and forwards the API to the mock
// (dev/mock-api.mjs) or to a real memgate (MEMGATE_URL).
const target = process.env.MEMGATE_URL ?? 'http://127.0.0.1:8788';

export default defineConfig(({ command }) => ({
  base: command === 'build' ? './' : '/console/',
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
  },
  server: {
    host: '127.0.0.1',
    port: 5173,
    strictPort: true,
    proxy: {
      '/admin': { target, changeOrigin: false },
      '/console/session': { target, changeOrigin: false },
    },
  },
}));
