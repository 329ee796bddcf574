import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Hono } from 'hono';
import { deleteCookie, setCookie } from 'hono/cookie';
import { SESSION_COOKIE, type TokenCheck } from './auth.js';

/** The package root: dist/server/dashboard → three levels up. The page's own files live in `ui/`. */
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const UI_DIR = join(ROOT, 'ui');
const require = createRequire(import.meta.url);

/**
 * The browser builds of the two libraries, served from the installed packages: the versions the
 * lockfile pins, no copy step to forget, nothing fetched from a CDN.
 */
const VENDOR: Record<string, () => string> = {
  'preact.mjs': () => require.resolve('preact'),
  'hooks.mjs': () => require.resolve('preact/hooks'),
  'htm.mjs': () => join(dirname(require.resolve('htm')), 'htm.module.js'),
};

const PAGE_FILES: Record<string, string> = {
  'app.js': 'text/javascript; charset=utf-8',
  'views.js': 'text/javascript; charset=utf-8',
  'capacity.js': 'text/javascript; charset=utf-8',
  'style.css': 'text/css; charset=utf-8',
};

const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

/** The dashboard: its page at `/`, its assets under `/ui/`, and the login form that sets the cookie. */
export function registerDashboard(app: Hono, check: TokenCheck): void {
  const page = (file: string) => readFile(join(UI_DIR, file), 'utf8');
  app.get('/', async (c) => c.html(await page('index.html'), 200, SECURITY_HEADERS));
  app.get('/login', async (c) =>
    c.html(
      loginPage(c.req.query('failed') !== undefined, c.req.query('expired') !== undefined),
      200,
      SECURITY_HEADERS,
    ),
  );
  app.get('/ui/vendor/:file', async (c) => {
    const at = VENDOR[c.req.param('file')];
    if (!at) return c.notFound();
    // The hooks build imports the bare name `preact`; a browser needs the URL (an import map would
    // be an inline script, which the page's CSP forbids).
    const code = (await readFile(at(), 'utf8')).replace(
      /from\s*(["'])preact\1/g,
      'from"/ui/vendor/preact.mjs"',
    );
    return c.body(code, 200, {
      'content-type': 'text/javascript; charset=utf-8',
      'cache-control': 'public, max-age=3600',
    });
  });
  app.get('/ui/:file', async (c) => {
    const type = PAGE_FILES[c.req.param('file')];
    if (!type) return c.notFound();
    return c.body(await page(c.req.param('file')), 200, {
      'content-type': type,
      'cache-control': 'no-cache',
    });
  });
  app.post('/login', async (c) => {
    const form = await c.req.parseBody().catch(() => ({}) as Record<string, unknown>);
    const token = typeof form.token === 'string' ? form.token.trim() : '';
    if (!token || !(await check(token))) return c.redirect('/login?failed', 303);
    setCookie(c, SESSION_COOKIE, token, {
      httpOnly: true,
      sameSite: 'Strict',
      path: '/',
      secure: new URL(c.req.url).protocol === 'https:',
      maxAge: 12 * 3600,
    });
    return c.redirect('/', 303);
  });
  app.post('/logout', (c) => {
    deleteCookie(c, SESSION_COOKIE, { path: '/' });
    return c.redirect('/login', 303);
  });
}

/** `failed`: the token just pasted was refused. `expired`: an open page lost its session. */
function loginPage(failed: boolean, expired: boolean): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kici — log in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,"><link rel="stylesheet" href="/ui/style.css"></head>
<body class="login"><form method="post" action="/login">
<h1>kici orchestrator</h1>
<label for="token">Access token</label>
<input id="token" name="token" type="password" autocomplete="off" autofocus required>
${failed ? '<p class="error" role="alert">That token is not valid here.</p>' : ''}
${expired && !failed ? '<p class="error" role="alert" id="expired">Your session ended: the token was revoked or has expired. Log in again.</p>' : ''}
<button type="submit">Log in</button>
<p class="hint">Any access token works: <code>kici-admin access token create --role viewer</code> makes one.</p>
</form></body></html>`;
}
