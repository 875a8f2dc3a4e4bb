// A screenshot of a page that draws after its load event (the trace viewer imports a trace in timed chunks, which
// `chromium --headless --screenshot` does not wait for): headless Chromium over the DevTools protocol, a real wait,
// an optional click (to select an event and show its args), the screenshot. Node 20+ (its WebSocket) and chromium.
// usage: node --experimental-websocket bench/screenshots/cdp_screenshot.js URL OUT.png WAIT_MS WIDTH HEIGHT [X,Y]
const [url, out, wait, w, h, click] = process.argv.slice(2);
const { spawn } = require('child_process');
const fs = require('fs');
const chrome = spawn('chromium', ['--headless=new', '--no-sandbox', '--disable-gpu', '--remote-debugging-port=9333',
  '--user-data-dir=/tmp/chr-cdp', `--window-size=${w},${h}`, 'about:blank'], { stdio: 'ignore' });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
(async () => {
  let pages;
  for (let i = 0; i < 50; i++) {
    try { pages = await (await fetch('http://127.0.0.1:9333/json')).json(); break; } catch { await sleep(200); }
  }
  const page = pages.find((p) => p.type === 'page');
  const ws = new WebSocket(page.webSocketDebuggerUrl);
  let id = 0; const waiting = {};
  ws.onmessage = (m) => { const d = JSON.parse(m.data); if (d.id && waiting[d.id]) { waiting[d.id](d); delete waiting[d.id]; } };
  await new Promise((r) => (ws.onopen = r));
  const send = (method, params = {}) => new Promise((r) => { waiting[++id] = r; ws.send(JSON.stringify({ id, method, params })); });
  await send('Emulation.setDeviceMetricsOverride', { width: +w, height: +h, deviceScaleFactor: 1, mobile: false });
  await send('Page.navigate', { url });
  await sleep(+wait);
  if (click) {
    const [x, y] = click.split(',').map(Number);
    for (const type of ['mouseMoved', 'mousePressed', 'mouseReleased'])
      await send('Input.dispatchMouseEvent', { type, x, y, button: 'left', clickCount: 1 });
    await sleep(3000);
  }
  const shot = await send('Page.captureScreenshot', { format: 'png' });
  fs.writeFileSync(out, Buffer.from(shot.result.data, 'base64'));
  chrome.kill(); process.exit(0);
})();
