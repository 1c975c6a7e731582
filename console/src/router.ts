// Routing by the URL fragment (`/console/#/records/mem-1`): memgate serves one index.html and
// needs no fallback route, and every screen has an address that can be bookmarked and shared.

import { useEffect, useState } from 'preact/hooks';

export interface Route {
  screen: string;
  parts: string[];
  params: URLSearchParams;
}

export function parse(hash: string): Route {
  const [path, query = ''] = hash.replace(/^#\/?/, '').split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { screen: parts[0] ?? 'overview', parts: parts.slice(1), params: new URLSearchParams(query) };
}

export function href(screen: string, ...parts: string[]): string {
  return `#/${[screen, ...parts].map(encodeURIComponent).join('/')}`;
}

export function go(to: string): void {
  if (location.hash !== to) location.hash = to;
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parse(location.hash));
  useEffect(() => {
    const onChange = () => setRoute(parse(location.hash));
    addEventListener('hashchange', onChange);
    return () => removeEventListener('hashchange', onChange);
  }, []);
  return route;
}
