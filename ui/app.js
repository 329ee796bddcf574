// The dashboard shell: hash routing, the live stream, and data loading through the JSON API.
import { h, render } from '/ui/vendor/preact.mjs';
import { useEffect, useState } from '/ui/vendor/hooks.mjs';
import htm from '/ui/vendor/htm.mjs';
import { Capacity } from '/ui/capacity.js';
import { Agents, Cluster, Events, Job, Jobs, Overview, Scalers } from '/ui/views.js';

const html = htm.bind(h);

let leaving = false;
// Whether this page was ever let in: a 401 after that means the session ended, not that nobody logged in.
let admitted = false;

/** Fetch JSON from the API with the login cookie; a 401 sends the person to the login form, saying why. */
export async function api(path, init) {
  const res = await fetch(path, { credentials: 'same-origin', ...init });
  if (res.status === 401) {
    // Several loads can fail at once; one navigation is enough.
    if (!leaving) location.replace(admitted ? '/login?expired' : '/login');
    leaving = true;
    throw new Error('not logged in');
  }
  if (res.ok) admitted = true;
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error((body.problems ?? [body.error ?? res.statusText]).join('; '));
  return body;
}

// One EventSource for the page; views re-read their data on every `change`. EventSource retries by
// itself while the orchestrator is unreachable (a restart); `hello` on the new stream reloads every
// view. It gives up for good when an answer is not a stream (a 401 once the token is gone, a 503
// while the server starts): then one API call decides, a 401 sending the person to the login form,
// anything else opening a new stream a little later.
const listeners = new Set();
let live = 'connecting';
const liveListeners = new Set();
function setLive(s) {
  live = s;
  for (const f of liveListeners) f(s);
}
function connect() {
  const source = new EventSource('/api/v1/stream');
  source.addEventListener('hello', () => {
    setLive('up');
    for (const f of listeners) f();
  });
  source.addEventListener('change', () => {
    for (const f of listeners) f();
  });
  source.onerror = () => {
    setLive('down');
    if (source.readyState !== EventSource.CLOSED) return;
    setTimeout(() => {
      api('/api/v1/jobs?limit=1').then(connect, () => {
        if (!leaving) setTimeout(connect, 1000);
      });
    }, 1000);
  };
}
connect();

/** Load `loader()` now and again on every change; the last good value stays shown during a reload. */
export function useLive(loader, deps = []) {
  const [state, set] = useState({ data: undefined, error: undefined });
  useEffect(() => {
    let alive = true;
    let running = false;
    let again = false;
    const load = async () => {
      if (running) return void (again = true);
      running = true;
      try {
        do {
          again = false;
          const data = await loader();
          if (alive) set({ data, error: undefined });
        } while (again && alive);
      } catch (err) {
        if (alive) set((s) => ({ data: s.data, error: String(err.message ?? err) }));
      } finally {
        running = false;
      }
    };
    void load();
    listeners.add(load);
    return () => {
      alive = false;
      listeners.delete(load);
    };
  }, deps);
  return state;
}

function useHash() {
  const [hash, set] = useState(location.hash || '#/');
  useEffect(() => {
    const on = () => set(location.hash || '#/');
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return hash;
}

function LiveBadge() {
  const [s, set] = useState(live);
  useEffect(() => {
    liveListeners.add(set);
    // The stream may have opened between the first render and this effect.
    set(live);
    return () => liveListeners.delete(set);
  }, []);
  return html`<span class="live ${s}" data-live=${s}
    >${s === 'up' ? 'live' : s === 'down' ? 'reconnecting…' : 'connecting…'}</span
  >`;
}

const PAGES = [
  ['#/', 'Overview'],
  ['#/jobs', 'Jobs'],
  ['#/agents', 'Agents'],
  ['#/scalers', 'Scalers'],
  ['#/capacity', 'Capacity'],
  ['#/events', 'Events'],
  ['#/cluster', 'Cluster'],
];

function App() {
  const hash = useHash();
  const [path, query = ''] = hash.slice(1).split('?');
  const params = new URLSearchParams(query);
  const parts = path.split('/').filter(Boolean);
  let page;
  if (parts[0] === 'jobs' && parts[1]) page = html`<${Job} id=${parts[1]} />`;
  else if (parts[0] === 'jobs') page = html`<${Jobs} params=${params} />`;
  else if (parts[0] === 'agents') page = html`<${Agents} />`;
  else if (parts[0] === 'scalers') page = html`<${Scalers} job=${params.get('job') ?? ''} />`;
  else if (parts[0] === 'capacity') page = html`<${Capacity} />`;
  else if (parts[0] === 'events') page = html`<${Events} />`;
  else if (parts[0] === 'cluster') page = html`<${Cluster} />`;
  else page = html`<${Overview} />`;
  const on = '#/' + (parts[0] ?? '');
  return html`
    <header>
      <h1>kici orchestrator</h1>
      ${PAGES.map(([href, label]) => html`<a href=${href} class=${on === href ? 'on' : ''}>${label}</a>`)}
      <${LiveBadge} />
      <form method="post" action="/logout"><button type="submit">Log out</button></form>
    </header>
    <main>${page}</main>
  `;
}

// The placeholder is static HTML, not Preact's: clear it, or render would keep it below the app.
const root = document.getElementById('app');
root.textContent = '';
render(html`<${App} />`, root);
