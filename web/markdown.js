// A small Markdown renderer for untrusted text (model output). It builds DOM
// nodes directly and never parses HTML: raw HTML in the input stays text.
// Supports fenced code, headings, paragraphs, lists, block quotes, tables,
// rules, inline code, bold, italic, strike-through and http(s)/mailto links.
import { h } from './dom.js';

const FENCE = /^\s{0,3}(```+|~~~+)\s*([\w+#.-]*)/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^\s{0,3}>\s?/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_SEP = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

export function renderMarkdown(text) {
  const root = document.createDocumentFragment();
  blocks(text.replace(/\r\n?/g, '\n').split('\n'), root);
  return root;
}

function startsBlock(line, next) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line) ||
         (line.includes('|') && next !== undefined && TABLE_SEP.test(next) && next.includes('-'));
}

function blocks(lines, parent) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (!line.trim()) { i++; continue; }
    if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence)) body.push(lines[i++]);
      i++;  // the closing fence (or the end: an unfinished block while streaming)
      const code = h('code', m[2] ? { class: 'lang-' + m[2] } : {}, body.join('\n'));
      parent.appendChild(h('pre', {}, code));
      continue;
    }
    if ((m = HEADING.exec(line))) {
      parent.appendChild(inline(h('h' + Math.min(6, m[1].length + 2), {}), m[2]));
      i++;
      continue;
    }
    if (RULE.test(line)) { parent.appendChild(h('hr', {})); i++; continue; }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && QUOTE.test(lines[i])) body.push(lines[i++].replace(QUOTE, ''));
      const quote = h('blockquote', {});
      blocks(body, quote);
      parent.appendChild(quote);
      continue;
    }
    if (line.includes('|') && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      const rows = [line];
      i += 2;
      while (i < lines.length && lines[i].includes('|') && lines[i].trim()) rows.push(lines[i++]);
      parent.appendChild(table(rows));
      continue;
    }
    if ((m = ITEM.exec(line))) {
      i = list(lines, i, parent);
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && (para.length === 0 || !startsBlock(lines[i], lines[i + 1]))) para.push(lines[i++]);
    const p = h('p', {});
    para.forEach((l, k) => {
      if (k > 0) p.appendChild(/ {2,}$|\\$/.test(para[k - 1]) ? h('br', {}) : document.createTextNode(' '));
      inline(p, l.replace(/ {2,}$|\\$/, '').trim());
    });
    parent.appendChild(p);
  }
}

function list(lines, i, parent) {
  const first = ITEM.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const el = h(ordered ? 'ol' : 'ul', ordered && parseInt(first[2], 10) !== 1 ? { start: parseInt(first[2], 10) } : {});
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
    const body = [m[3]];
    i++;
    // Continuation lines and nested lists: indented deeper than the marker.
    while (i < lines.length && (lines[i].trim() === '' ? (lines[i + 1] !== undefined && /^\s+\S/.test(lines[i + 1]) && leading(lines[i + 1]) > indent)
                                                         : leading(lines[i]) > indent && !(ITEM.exec(lines[i]) && leading(lines[i]) === indent))) {
      body.push(lines[i].slice(Math.min(leading(lines[i]), indent + 2)));
      i++;
    }
    const li = h('li', {});
    if (body.length === 1) inline(li, body[0]);
    else blocks(body, li);
    el.appendChild(li);
    while (i < lines.length && !lines[i].trim() && lines[i + 1] !== undefined && ITEM.exec(lines[i + 1]) &&
           ITEM.exec(lines[i + 1])[1].length === indent) i++;
  }
  parent.appendChild(el);
  return i;
}

function leading(line) { return line.length - line.trimStart().length; }

function cells(row) {
  let r = row.trim();
  if (r.startsWith('|')) r = r.slice(1);
  if (r.endsWith('|') && !r.endsWith('\\|')) r = r.slice(0, -1);
  return r.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

function table(rows) {
  const head = h('tr', {}, cells(rows[0]).map((c) => inline(h('th', {}), c)));
  const body = rows.slice(1).map((r) => h('tr', {}, cells(r).map((c) => inline(h('td', {}), c))));
  return h('div', { class: 'table-wrap' }, h('table', {}, h('thead', {}, head), h('tbody', {}, body)));
}

// Inline spans, earliest match first.
const INLINE = [
  { re: /`+/, fn: code },
  { re: /\*\*|(?<!\w)__/, fn: (t, m, p) => pair(t, m, p, 'strong') },
  { re: /~~/, fn: (t, m, p) => pair(t, m, p, 'del') },
  { re: /\*|(?<!\w)_(?=\S)/, fn: (t, m, p) => pair(t, m, p, 'em') },
  { re: /!?\[/, fn: link },
  { re: /\bhttps?:\/\/[^\s<>()]+[^\s<>().,;:!?'"]/, fn: autolink },
];

export function inline(parent, text) {
  let rest = text;
  while (rest) {
    let best = null;
    for (const rule of INLINE) {
      const m = rule.re.exec(rest);
      if (m && (!best || m.index < best.m.index)) best = { m, rule };
    }
    if (!best) break;
    if (best.m.index > 0) parent.appendChild(document.createTextNode(rest.slice(0, best.m.index)));
    const consumed = best.rule.fn(rest.slice(best.m.index), best.m[0], parent);
    rest = rest.slice(best.m.index + consumed);
  }
  if (rest) parent.appendChild(document.createTextNode(rest));
  return parent;
}

// Each handler gets the text from its match on and returns how much it used.
function code(text, ticks, parent) {
  const end = text.indexOf(ticks, ticks.length);
  if (end < 0) { parent.appendChild(document.createTextNode(ticks)); return ticks.length; }
  parent.appendChild(h('code', {}, text.slice(ticks.length, end).replace(/^ (.*) $/, '$1')));
  return end + ticks.length;
}

function pair(text, marker, parent, tag) {
  const end = text.indexOf(marker, marker.length + 1);
  if (end < 0 || /\s/.test(text[marker.length]) || /\s/.test(text[end - 1])) {
    parent.appendChild(document.createTextNode(marker));
    return marker.length;
  }
  parent.appendChild(inline(h(tag, {}), text.slice(marker.length, end)));
  return end + marker.length;
}

function safeUrl(url) {
  try {
    const u = new URL(url, window.location.href);
    return ['http:', 'https:', 'mailto:'].includes(u.protocol) ? u.href : null;
  } catch (_) {
    return null;
  }
}

function link(text, open, parent) {
  const m = /^!?\[([^\]]*)\]\(\s*<?([^\s)>]+)>?(?:\s+"[^"]*")?\s*\)/.exec(text);
  if (!m) { parent.appendChild(document.createTextNode(open)); return open.length; }
  const href = safeUrl(m[2]);
  // Images are shown as links: the page loads nothing a model names.
  const label = m[1] || m[2];
  if (!href) parent.appendChild(document.createTextNode(m[0]));
  else parent.appendChild(inline(h('a', { href, target: '_blank', rel: 'noopener noreferrer nofollow' }), label));
  return m[0].length;
}

function autolink(text, url, parent) {
  const href = safeUrl(url);
  parent.appendChild(href ? h('a', { href, target: '_blank', rel: 'noopener noreferrer nofollow' }, url) : document.createTextNode(url));
  return url.length;
}
