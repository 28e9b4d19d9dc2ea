// The built-in web UI in a real browser (Debian's chromium, puppeteer-core):
// the API key prompt, a streamed chat stopped mid-stream (the daemon counts
// the cancellation), a hostile answer (<img onerror>, <script>) rendered as
// text, the reasoning block, a tool call, loading and unloading a model from
// the Models page, the dashboard's numbers moving, conversations surviving a
// reload, and no Content-Security-Policy violation anywhere. Screenshots go
// to $SCREENSHOT_DIR.
//   env: NEURON_BASE_URL, NEURON_API_KEY, CHROMIUM, SCREENSHOT_DIR,
//        SCRIPTED_MODEL (dir: answers with reasoning, Markdown, <img onerror> and <script>), TOOL_MODEL (dir: answers a tool call)
import fs from 'node:fs';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const base = process.env.NEURON_BASE_URL;
const key = process.env.NEURON_API_KEY;
const shots = process.env.SCREENSHOT_DIR;
fs.mkdirSync(shots, { recursive: true });
const auth = { authorization: 'Bearer ' + key };

let failures = 0;
function check(ok, what) {
  console.log((ok ? 'PASS ' : 'FAIL ') + what);
  if (!ok) failures++;
}

async function metric(name) {
  const text = await (await fetch(base + '/metrics', { headers: auth })).text();
  return text.split('\n').filter((l) => l.startsWith(name)).reduce((a, l) => a + Number(l.split(' ').pop()), 0);
}

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--window-size=1280,900'],
  defaultViewport: { width: 1280, height: 900 },
});
const problems = [];  // CSP violations, script errors
let deliberate = false;  // set once the test provokes violations itself
let page;
try {
  page = await browser.newPage();
  page.on('console', (m) => {
    const t = m.text();
    // 401s are expected before the key is given; anything about the policy is not.
    if (m.type() === 'error' && !/status of 401/.test(t) && !deliberate) problems.push('console: ' + t);
  });
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));  // e.g. the answer's pwn() running
  page.on('dialog', async (d) => { problems.push('dialog: ' + d.message()); await d.dismiss(); });  // its alert(1)
  await page.evaluateOnNewDocument(() => {
    document.addEventListener('securitypolicyviolation', (e) => { window.__csp = (window.__csp || []).concat(e.violatedDirective + ' ' + e.blockedURI); });
  });

  // ---- the page and its policy; the key prompt
  const res = await page.goto(base + '/', { waitUntil: 'load' });
  const csp = res.headers()['content-security-policy'] || '';
  check(res.status() === 200 && /script-src 'self'/.test(csp) && !/unsafe/.test(csp), 'GET / answers with a strict Content-Security-Policy: ' + csp);
  await page.waitForSelector('#api-key-dialog', { timeout: 10000 });
  check(true, 'a 401 from the API asks for the key');
  await page.type('#api-key-input', key);
  await page.click('#api-key-submit');
  await page.waitForFunction(() => document.querySelectorAll('#model-select option[value]:not([value=""])').length > 0, { timeout: 10000 });
  const options = await page.$$eval('#model-select option', (o) => o.map((x) => x.value));
  const tiny = options.find((o) => o === 'qwen3-tiny-a');  // a directory model's one id: its folder name
  check(options.length === 1 && tiny, 'the chat lists the loaded model: ' + options.join(', '));

  // ---- a streamed chat, stopped mid-stream
  await page.select('#model-select', tiny);
  await page.$eval('details.settings', (d) => { d.open = true; });
  await page.$eval('#setting-max_tokens', (el) => { el.value = ''; });
  await page.type('#setting-max_tokens', '20000');
  await page.type('#system-prompt', 'You are terse.');
  const cancelledBefore = await metric('neuron_requests_cancelled_total');
  await page.type('#prompt', 'Tell me a long story');
  await page.click('#send');
  const lengths = [];
  for (let i = 0; i < 40 && lengths.length < 3; i++) {
    await new Promise((r) => setTimeout(r, 150));
    const n = await page.$eval('#messages .msg.assistant:last-child', (el) => el.textContent.length);
    if (!lengths.length || n > lengths[lengths.length - 1]) lengths.push(n);
  }
  check(lengths.length >= 3, 'streamed tokens arrive while generating (text lengths ' + lengths.join(' < ') + ')');
  check((await page.$eval('#send', (b) => b.textContent)) === 'Stop', 'the send button is a stop button while generating');
  await page.screenshot({ path: path.join(shots, '1-chat-streaming.png') });
  await page.click('#send');
  await page.waitForFunction(() => document.querySelector('#send').textContent === 'Send', { timeout: 10000 });
  check(await page.$eval('#messages .msg.assistant:last-child .meta', (el) => el.textContent.includes('stopped')), 'the stopped answer says so');
  let cancelled = 0;
  for (let i = 0; i < 50 && cancelled <= cancelledBefore; i++) {
    cancelled = await metric('neuron_requests_cancelled_total');
    await new Promise((r) => setTimeout(r, 100));
  }
  check(cancelled > cancelledBefore, 'stop cancels the generation in the daemon (neuron_requests_cancelled_total ' + cancelledBefore + ' -> ' + cancelled + ')');
  const inFlight = await metric('neuron_requests_in_flight');
  check(inFlight === 0, 'nothing is left in flight after stop');

  // ---- load two models from the Models page
  await page.click('#nav-models');
  await page.waitForSelector('#load-form');
  for (const [dir, name] of [[process.env.SCRIPTED_MODEL, 'scripted'], [process.env.TOOL_MODEL, 'tool-caller']]) {
    await page.type('#load-model-id', dir);
    await page.type('#load-name', name);
    await page.$eval('#load-keep-alive', (el) => { el.value = '-1'; });
    await page.click('#load-submit');
    await page.waitForFunction((n) => [...document.querySelectorAll('#models-body tr')].some((r) => r.dataset.model === n && r.textContent.includes('loaded')),
                                { timeout: 30000 }, name);
    await page.$eval('#load-name', (el) => { el.value = ''; });
    check(true, 'the Models page loads ' + name);
  }
  await page.screenshot({ path: path.join(shots, '2-models-loaded.png') });

  // ---- a hostile answer: Markdown, reasoning, <img onerror>, <script>
  await page.click('#nav-chat');
  await page.waitForSelector('#new-chat');
  await page.click('#new-chat');
  await page.waitForFunction(() => [...document.querySelectorAll('#model-select option')].some((o) => o.value === 'scripted'), { timeout: 10000 });
  await page.select('#model-select', 'scripted');
  await page.type('#prompt', 'hi');
  await page.click('#send');
  await page.waitForFunction(() => document.querySelector('#send').textContent === 'Send' &&
                             document.querySelector('#messages .msg.assistant:last-child .content'), { timeout: 20000 });
  const rendered = await page.$eval('#messages .msg.assistant:last-child', (el) => ({
    text: el.querySelector('.content').textContent,
    strong: [...el.querySelectorAll('.content strong')].map((s) => s.textContent),
    reasoning: el.querySelector('details.reasoning .reasoning-text')?.textContent || '',
    elements: el.querySelectorAll('img, script, iframe, object, embed, [onerror], [onload]').length,
  }));
  console.log('scripted answer as rendered: ' + JSON.stringify(rendered));
  check(rendered.reasoning.trim().length > 0, 'the reasoning shows in its collapsible block: ' + JSON.stringify(rendered.reasoning));
  check(rendered.strong.length === 1, 'Markdown renders (**bold** -> <strong>)');
  check(rendered.text.includes('<img src=x onerror=alert(1)><script>pwn()</SCRIPT>'), 'the raw HTML of the answer is shown as text');
  check(rendered.elements === 0, 'no element from the answer exists (no img, script, handler attributes)');
  await new Promise((r) => setTimeout(r, 500));  // an image error or a script would have fired by now
  check(!problems.some((p) => /dialog|pwn/.test(p)), 'nothing from the answer ran (no alert dialog, no pwn() call)');
  await page.$eval('#messages .msg.assistant:last-child details.reasoning', (d) => { d.open = true; });
  await page.screenshot({ path: path.join(shots, '3-chat-hostile-answer.png') });
  check((await page.evaluate(() => window.__csp || [])).length === 0, 'no Content-Security-Policy violation so far');

  // ---- a tool call
  await page.click('#new-chat');
  await page.select('#model-select', 'tool-caller');
  await page.$eval('details.settings', (d) => { d.open = true; });
  await page.type('#setting-tools', JSON.stringify([{ type: 'function', function: { name: 'lookup', description: 'Looks things up',
    parameters: { type: 'object', properties: { q: { type: 'array', items: { type: 'integer' } } }, required: ['q'] } } }]));
  await page.$eval('details.settings', (d) => { d.open = false; });
  await page.type('#prompt', 'look it up');
  await page.click('#send');
  await page.waitForFunction(() => document.querySelector('#send').textContent === 'Send' &&
                             document.querySelector('#messages .msg.assistant:last-child .tool-call'), { timeout: 20000 });
  const call = await page.$eval('#messages .msg.assistant:last-child .tool-call', (el) => el.textContent);
  check(call.includes('lookup') && call.includes('"q"'), 'the tool call shows its name and arguments: ' + call.replace(/\s+/g, ' '));
  await page.screenshot({ path: path.join(shots, '4-chat-tool-call.png') });

  // ---- the dashboard's numbers move
  await page.click('#nav-node');
  await page.waitForSelector('#tokens-generated');
  await page.waitForFunction(() => document.querySelector('#node-status')?.textContent === 'ok', { timeout: 10000 });
  const before = Number(await page.$eval('#tokens-generated', (el) => el.textContent));
  const r = await fetch(base + '/v1/chat/completions', {
    method: 'POST', headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ model: tiny, messages: [{ role: 'user', content: 'count' }], max_tokens: 64, ignore_eos: true }),
  });
  check(r.ok, 'a chat from outside the page completes');
  await page.waitForFunction((b) => Number(document.querySelector('#tokens-generated').textContent) >= b + 64, { timeout: 10000 }, before);
  const after = Number(await page.$eval('#tokens-generated', (el) => el.textContent));
  check(after >= before + 64, 'the dashboard counts the generated tokens (' + before + ' -> ' + after + ')');
  // The generated tokens/s plot (the first) saw the generation.
  await page.waitForFunction(() => Number(/max ([\d.]+)/.exec(document.querySelector('canvas.plot').getAttribute('aria-label') || '')?.[1]) > 0,
                             { timeout: 5000 });
  check(true, 'the tokens/s plot shows the generation: ' + await page.$eval('canvas.plot', (c) => c.getAttribute('aria-label')));
  await new Promise((r2) => setTimeout(r2, 2500));  // a few more samples on the plots
  await page.screenshot({ path: path.join(shots, '5-dashboard.png'), fullPage: true });

  // ---- unload from the Models page
  await page.click('#nav-models');
  await page.waitForSelector('#models-body tr[data-model="scripted"] button.unload');
  await page.click('#models-body tr[data-model="scripted"] button.unload');
  await page.waitForFunction(() => !document.querySelector('#models-body tr[data-model="scripted"]'), { timeout: 15000 });
  const list = await (await fetch(base + '/models', { headers: auth })).json();
  check(!list.some((m) => m.id === 'scripted'), 'the Models page unloads a model');

  // ---- a reload keeps the conversations and the key (this browser session)
  await page.goto(base + '/#chat', { waitUntil: 'load' });
  await page.waitForSelector('.conv-list li');
  const titles = await page.$$eval('.conv-list .conv-title', (b) => b.map((x) => x.textContent));
  check(titles.length === 3 && titles.includes('Tell me a long story'), 'conversations survive a reload: ' + JSON.stringify(titles));
  check(!(await page.$('#api-key-dialog')), 'the key is kept for the browser session');
  const csp2 = await page.evaluate(() => window.__csp || []);
  check(csp2.length === 0, 'no Content-Security-Policy violation: ' + JSON.stringify(csp2));

  // ---- the policy is enforced: an inline script and another host's image are refused
  deliberate = true;
  const blocked = await page.evaluate(() => new Promise((resolve) => {
    const seen = [];
    document.addEventListener('securitypolicyviolation', (e) => { seen.push(e.effectiveDirective); if (seen.length === 2) resolve(seen); });
    const s = document.createElement('script');
    s.textContent = 'window.inlineRan = 1';
    document.body.appendChild(s);
    const img = document.createElement('img');
    img.src = 'http://203.0.113.1/x.png';
    document.body.appendChild(img);
    setTimeout(() => resolve(seen), 3000);
  }));
  const inlineRan = await page.evaluate(() => window.inlineRan);
  check(blocked.includes('script-src-elem') && blocked.includes('img-src') && inlineRan === undefined,
        'the policy refuses an inline script and another host\'s image: ' + JSON.stringify(blocked));
} catch (e) {
  check(false, 'unexpected: ' + (e.stack || e));
  if (page) await page.screenshot({ path: path.join(shots, 'failure.png') }).catch(() => {});
} finally {
  await browser.close();
}
check(problems.length === 0, 'no script error or policy report on the console' + (problems.length ? ': ' + problems.join(' | ') : ''));
process.exit(failures ? 1 : 0);
