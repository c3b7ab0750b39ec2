// md.js: the console's Markdown renderer for model output.
//
// Safety contract: renderMarkdown(text) returns a DocumentFragment built
// only with document.createElement (from the fixed whitelist below) and
// document.createTextNode. It never parses HTML: raw HTML in the text is
// shown as text. Attributes set: class on the whitelisted elements, and
// href (only http:, https: and mailto: URLs), rel and target on links. A
// link with another scheme (javascript:, data:, vbscript:, relative) is
// shown as its text only.
"use strict";

(function () {
  const ALLOWED = new Set(["p", "br", "strong", "em", "del", "code", "pre", "a", "ul", "ol", "li",
    "blockquote", "h3", "h4", "h5", "h6", "hr", "div", "button", "span"]);

  function el(tag, cls) {
    if (!ALLOWED.has(tag)) throw new Error("md.js: element not allowed: " + tag);
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    return e;
  }

  // safeURL returns the URL when its scheme is http, https or mailto, else null.
  function safeURL(raw) {
    let u;
    try {
      u = new URL(raw); // relative URLs throw: they are not linked
    } catch (_) {
      return null;
    }
    return ["http:", "https:", "mailto:"].includes(u.protocol) ? u.href : null;
  }

  function link(parent, label, url) {
    const href = safeURL(url);
    if (!href) {
      parent.appendChild(document.createTextNode(label === url ? url : label + " (" + url + ")"));
      return;
    }
    const a = el("a");
    a.href = href;
    a.rel = "noopener noreferrer nofollow";
    a.target = "_blank";
    a.appendChild(document.createTextNode(label));
    parent.appendChild(a);
  }

  // Inline syntax: `code`, **strong**, __strong__, *em*, _em_, ~~del~~,
  // [label](url), bare http(s) URLs.
  const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*(?=\S)([\s\S]*?\S)\*\*|__(?=\S)([\s\S]*?\S)__|~~(?=\S)([\s\S]*?\S)~~|\*(?=[^\s*])([^*]*?[^\s*])\*|(?<![A-Za-z0-9])_(?=[^\s_])([^_]*?[^\s_])_(?![A-Za-z0-9])|\[([^\]\n]+)\]\(\s*<?([^)\s>]+)>?\s*\)|(https?:\/\/[^\s<>"'()]*[^\s<>"'().,;:!?])/g;

  function inline(parent, text, depth) {
    if (depth > 8) {
      parent.appendChild(document.createTextNode(text));
      return;
    }
    const re = new RegExp(INLINE.source, "g");
    let last = 0;
    let m;
    while ((m = re.exec(text)) !== null) {
      if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
      last = re.lastIndex;
      if (m[1] !== undefined) {
        const c = el("code");
        c.appendChild(document.createTextNode(m[2].replace(/^ (.*) $/, "$1")));
        parent.appendChild(c);
      } else if (m[3] !== undefined || m[4] !== undefined) {
        const s = el("strong");
        inline(s, m[3] !== undefined ? m[3] : m[4], depth + 1);
        parent.appendChild(s);
      } else if (m[5] !== undefined) {
        const d = el("del");
        inline(d, m[5], depth + 1);
        parent.appendChild(d);
      } else if (m[6] !== undefined || m[7] !== undefined) {
        const e = el("em");
        inline(e, m[6] !== undefined ? m[6] : m[7], depth + 1);
        parent.appendChild(e);
      } else if (m[8] !== undefined) {
        link(parent, m[8], m[9]);
      } else if (m[10] !== undefined) {
        link(parent, m[10], m[10]);
      }
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  // lines → inline content with <br> between lines.
  function inlineLines(parent, lines) {
    lines.forEach((l, i) => {
      if (i > 0) parent.appendChild(el("br"));
      inline(parent, l, 0);
    });
  }

  function codeBlock(lang, code) {
    const wrap = el("div", "code");
    const bar = el("div", "code-bar");
    const label = el("span", "code-lang");
    label.appendChild(document.createTextNode(lang || "code"));
    const copy = el("button", "copy");
    copy.type = "button";
    copy.appendChild(document.createTextNode("Copy"));
    copy.addEventListener("click", () => {
      const done = () => { copy.textContent = "Copied"; setTimeout(() => { copy.textContent = "Copy"; }, 1500); };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(code).then(done, () => { copy.textContent = "Copy failed"; });
      } else {
        // Plain http on a LAN address has no clipboard API: select the text.
        const r = document.createRange();
        r.selectNodeContents(pre);
        const s = window.getSelection();
        s.removeAllRanges();
        s.addRange(r);
        copy.textContent = "Selected: press Ctrl+C";
      }
    });
    bar.appendChild(label);
    bar.appendChild(copy);
    const pre = el("pre");
    const c = el("code");
    c.appendChild(document.createTextNode(code));
    pre.appendChild(c);
    wrap.appendChild(bar);
    wrap.appendChild(pre);
    return wrap;
  }

  const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)\s*$/;
  const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
  const ORDERED = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
  const QUOTE = /^\s{0,3}>\s?(.*)$/;
  const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;

  function blocks(parent, lines, depth) {
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (line.trim() === "") {
        i++;
      } else if ((m = FENCE.exec(line))) {
        const fence = m[1];
        const body = [];
        i++;
        while (i < lines.length && !(lines[i].trim().startsWith(fence[0].repeat(fence.length)) && lines[i].trim().replace(/[`~]/g, "") === "")) {
          body.push(lines[i]);
          i++;
        }
        i++; // the closing fence (or the end: an unclosed block while streaming)
        parent.appendChild(codeBlock(m[2], body.join("\n")));
      } else if ((m = HEADING.exec(line))) {
        const h = el("h" + Math.min(6, m[1].length + 2));
        inline(h, m[2], 0);
        parent.appendChild(h);
        i++;
      } else if (RULE.test(line)) {
        parent.appendChild(el("hr"));
        i++;
      } else if (QUOTE.test(line) && depth < 4) {
        const inner = [];
        while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
          inner.push(m[1]);
          i++;
        }
        const q = el("blockquote");
        blocks(q, inner, depth + 1);
        parent.appendChild(q);
      } else if (BULLET.test(line) || ORDERED.test(line)) {
        const ordered = !BULLET.test(line);
        const re = ordered ? ORDERED : BULLET;
        const list = el(ordered ? "ol" : "ul");
        if (ordered) {
          const start = parseInt(ORDERED.exec(line)[1], 10);
          if (start !== 1) list.start = start;
        }
        while (i < lines.length && (m = re.exec(lines[i]))) {
          const li = el("li");
          const item = [ordered ? m[2] : m[1]];
          i++;
          while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !re.test(lines[i])) {
            item.push(lines[i].trim());
            i++;
          }
          inlineLines(li, item);
          list.appendChild(li);
        }
        parent.appendChild(list);
      } else {
        const para = [];
        while (i < lines.length && lines[i].trim() !== "" && !FENCE.test(lines[i]) && !HEADING.test(lines[i]) &&
          !(para.length > 0 && (BULLET.test(lines[i]) || QUOTE.test(lines[i])))) {
          para.push(lines[i]);
          i++;
        }
        const p = el("p");
        inlineLines(p, para);
        parent.appendChild(p);
      }
    }
  }

  // renderMarkdown turns model text into a safe DocumentFragment.
  window.renderMarkdown = function (text) {
    const f = document.createDocumentFragment();
    blocks(f, String(text).replace(/\r\n?/g, "\n").split("\n"), 0);
    return f;
  };
  window.safeURL = safeURL;
})();
