// tgpo harness helper, installed into every frame of every page (context.add_init_script) and, as a fallback,
// by the first observe()/execute() evaluate in a frame that lacks it. Defines window.__tgpo:
//   mutations      DOM change counter (MutationObserver; our own data-tgpo-* attributes, ignoreAttrs and the
//                  set-of-marks overlay excluded)
//   inputs         input/change events seen (a checkbox toggle changes no attribute, but it is an interface change)
//   pending        fetch / XHR requests in flight (settle() waits for 0)
//   clickables     WeakSet of elements that got a click-ish listener (addEventListener is wrapped at init time)
//   snapshot(prefix, taken)  inject data-tgpo-id ids, return the flat accessibility-like node list (one JSON)
//   settle(capMs)  resolves once the DOM was quiet for one animation frame and no request is pending (capped)
//   still(quietMs, capMs)  resolves once the DOM has not changed for quietMs and no request is pending (capped)
//   state()        {mutations, inputs, scrollY}
//   caretSheet     the style sheet that hides the caret (adopted by snapshot, for observe.py's capture_png)
(function () {
  if (window.__tgpo) return;
  const T = {mutations: 0, inputs: 0, pending: 0, lastChange: 0, lastDom: 0, clickables: new WeakSet(),
             ignoreAttrs: new Set(['data-tgpo-id', 'data-tgpo-next', 'data-tgpo-prefix'])};
  Object.defineProperty(window, '__tgpo', {value: T, enumerable: false, configurable: true});

  // ------------------------------------------------------------ change counters
  const now = () => (window.performance ? performance.now() : Date.now());
  // A record that only adds or removes the set-of-marks overlay (observe.py's MARKS_ATTR host element).
  const isMarks = (r) => {
    const ns = [...r.addedNodes, ...r.removedNodes];
    return ns.length > 0 && ns.every((x) => x.nodeType === 1 && x.hasAttribute('data-tgpo-marks'));
  };
  try {
    const mo = new MutationObserver((records) => {
      let n = 0;
      for (const r of records) {
        if (r.type === 'attributes' && T.ignoreAttrs.has(r.attributeName)) continue;
        if (r.type === 'childList' && isMarks(r)) continue;  // observe()'s own set-of-marks overlay
        n++;
      }
      if (n) { T.mutations += n; T.lastChange = T.lastDom = now(); }
    });
    mo.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
  } catch (e) { /* no DOM (should not happen) */ }
  const onInput = () => { T.inputs++; T.lastChange = T.lastDom = now(); };
  window.addEventListener('input', onInput, true);
  window.addEventListener('change', onInput, true);

  // ------------------------------------------------------------ click listener tracking (init-script time only)
  const CLICKY = new Set(['click', 'mousedown', 'mouseup', 'pointerdown', 'pointerup', 'dblclick']);
  try {
    const orig = EventTarget.prototype.addEventListener;
    EventTarget.prototype.addEventListener = function (type, listener, opts) {
      try {
        if (CLICKY.has(type) && this instanceof Element) T.clickables.add(this);
      } catch (e) { /* ignore */ }
      return orig.call(this, type, listener, opts);
    };
  } catch (e) { /* ignore */ }

  // ------------------------------------------------------------ keep the agent on one page: no popups
  document.addEventListener('click', (ev) => {
    try {
      const a = ev.target && ev.target.closest && ev.target.closest('a[target]');
      if (a && a.target && a.target !== '_self' && a.target !== '_parent' && a.target !== '_top') a.target = '_self';
    } catch (e) { /* ignore */ }
  }, true);
  try {
    window.open = function (url) { if (url) window.location.href = url; return window; };
  } catch (e) { /* ignore */ }

  // ------------------------------------------------------------ pending network requests
  try {
    const origFetch = window.fetch;
    if (origFetch) {
      window.fetch = function () {
        T.pending++;
        return origFetch.apply(this, arguments).finally(() => { T.pending--; T.lastChange = now(); });
      };
    }
    const origSend = XMLHttpRequest.prototype.send;
    XMLHttpRequest.prototype.send = function () {
      T.pending++;
      let done = false;
      const fin = () => { if (!done) { done = true; T.pending--; T.lastChange = now(); } };
      this.addEventListener('loadend', fin);
      try { return origSend.apply(this, arguments); } catch (e) { fin(); throw e; }
    };
  } catch (e) { /* ignore */ }

  T.state = function () {
    const se = document.scrollingElement || document.documentElement;
    return {mutations: T.mutations, inputs: T.inputs, scrollY: se ? se.scrollTop : 0};
  };

  T.settle = function (capMs) {
    return new Promise((resolve) => {
      const t0 = now();
      let last = T.mutations + T.inputs;
      let finished = false;
      const finish = (why) => { if (!finished) { finished = true; resolve(why); } };
      setTimeout(() => finish('cap'), capMs);  // hard cap, also covers frames where rAF never fires
      const tick = () => {
        requestAnimationFrame(() => {
          if (finished) return;
          const cur = T.mutations + T.inputs;
          if (cur === last && T.pending <= 0) return finish('quiet');
          last = cur;
          if (now() - t0 > capMs) return finish('cap');
          tick();
        });
      };
      tick();
    });
  };

  // Before an element command: a page that is still appending content (a search page that adds its results one by
  // one, each with a fetched summary that pushes the next link down) moves the target between Playwright's
  // position check and its click; one quiet animation frame (settle) does not rule that out, a quiet window does.
  T.still = function (args) {
    const quietMs = args[0], capMs = args[1];
    return new Promise((resolve) => {
      const t0 = now();
      // DOM changes only (a request that ends moves nothing; what it brings is a change of its own). Not "unchanged
      // since the snapshot": a page's next change may be yet to come, and the observation's own screenshot changes
      // the focused field's style
      const check = () => {
        const t = now(), idle = t - T.lastDom;
        if (idle >= quietMs && T.pending <= 0) return resolve('still');
        if (t - t0 >= capMs) return resolve('cap');
        setTimeout(check, Math.max(5, Math.min(quietMs - idle, capMs - (t - t0))));
      };
      check();
    });
  };

  // ------------------------------------------------------------ scrolling (SCROLL [UP|DOWN])
  T.scroll = function (dir) {
    const sign = dir === 'UP' ? -1 : 1;
    const se = document.scrollingElement || document.documentElement;
    const before = se.scrollTop;
    window.scrollBy({top: sign * 0.8 * window.innerHeight, left: 0, behavior: 'instant'});
    if (se.scrollTop !== before) return {changed: true, target: 'window', from: before, to: se.scrollTop};
    // The window cannot move that way: scroll the largest visible scrollable box that can.
    let best = null, bestArea = 0;
    for (const el of document.querySelectorAll('*')) {
      if (el.scrollHeight <= el.clientHeight + 1) continue;
      const st = getComputedStyle(el);
      if (!/(auto|scroll|overlay)/.test(st.overflowY)) continue;
      const canMove = sign > 0 ? el.scrollTop + el.clientHeight < el.scrollHeight - 1 : el.scrollTop > 0;
      if (!canMove) continue;
      const r = el.getBoundingClientRect();
      const area = Math.max(0, r.width) * Math.max(0, r.height);
      if (area > bestArea) { best = el; bestArea = area; }
    }
    if (!best) return {changed: false, target: 'none', from: before, to: before};
    const b0 = best.scrollTop;
    best.scrollBy({top: sign * 0.8 * best.clientHeight, left: 0, behavior: 'instant'});
    return {changed: best.scrollTop !== b0, target: 'box', from: b0, to: best.scrollTop};
  };

  // ------------------------------------------------------------ snapshot: ids + accessibility-like tree
  const INTERACTIVE_ROLES = new Set(['button', 'link', 'checkbox', 'radio', 'tab', 'menuitem', 'menuitemcheckbox',
    'menuitemradio', 'option', 'switch', 'textbox', 'searchbox', 'combobox', 'slider', 'spinbutton', 'treeitem',
    'gridcell', 'clickable']);
  // Roles whose accessible name comes from their content (descendant text folds into the name).
  const NAME_FROM_CONTENT = new Set(['button', 'link', 'tab', 'menuitem', 'menuitemcheckbox', 'menuitemradio',
    'option', 'switch', 'treeitem', 'heading', 'clickable', 'gridcell', 'checkbox', 'radio']);
  const SHOWN_STRUCT = new Set(['heading', 'img', 'iframe', 'dialog', 'alertdialog', 'alert']);
  const CONTAINER_SEL = 'a[href],button,input,select,textarea,[role=button],[role=link],[role=checkbox],' +
    '[tabindex],[onclick],table';
  const SKIP_TAGS = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'META', 'LINK', 'TITLE']);
  const TEXT_INPUTS = new Set(['text', 'search', 'email', 'url', 'tel', 'password', 'number', 'date',
    'datetime-local', 'month', 'week', 'time', '']);
  const MAX_NAME = 120, MAX_TEXT = 400;
  const norm = (s) => (s || '').replace(/\s+/g, ' ').trim();
  const clip = (s, n) => (s.length > n ? s.slice(0, n - 1) + '…' : s);

  function implicitRole(el) {
    const tag = el.tagName;
    const explicit = (el.getAttribute('role') || '').trim().split(/\s+/)[0].toLowerCase();
    if (explicit && explicit !== 'presentation' && explicit !== 'none' && explicit !== 'generic') return explicit;
    switch (tag) {
      case 'A': return el.hasAttribute('href') ? 'link' : null;
      case 'BUTTON': return 'button';
      case 'SELECT': return 'combobox';
      case 'TEXTAREA': return 'textbox';
      case 'SUMMARY': return 'button';
      case 'IMG': return 'img';
      case 'IFRAME': case 'FRAME': return 'iframe';
      case 'H1': case 'H2': case 'H3': case 'H4': case 'H5': case 'H6': return 'heading';
      case 'INPUT': {
        const t = (el.getAttribute('type') || 'text').toLowerCase();
        if (t === 'hidden') return null;
        if (t === 'button' || t === 'submit' || t === 'reset' || t === 'image') return 'button';
        if (t === 'checkbox') return 'checkbox';
        if (t === 'radio') return 'radio';
        if (t === 'range') return 'slider';
        if (t === 'file') return 'button';
        if (t === 'color') return 'button';
        if (TEXT_INPUTS.has(t)) return 'textbox';
        return 'textbox';
      }
    }
    if (el.isContentEditable && (!el.parentElement || !el.parentElement.isContentEditable)) return 'textbox';
    return null;
  }

  function isClickable(el, st, parentSt) {
    const tag = el.tagName;
    if (tag === 'BODY' || tag === 'HTML') return false;
    if (typeof el.onclick === 'function' || el.hasAttribute('onclick')) return true;
    if (T.clickables.has(el)) return true;
    const ti = el.getAttribute('tabindex');
    if (ti !== null && parseInt(ti, 10) >= 0) return true;
    if (st.cursor === 'pointer' && (!parentSt || parentSt.cursor !== 'pointer')) return true;
    return false;
  }

  function textOfIds(ids) {
    const parts = [];
    for (const id of ids.split(/\s+/)) {
      const ref = id && document.getElementById(id);
      if (ref) parts.push(norm(ref.textContent));
    }
    return norm(parts.join(' '));
  }

  function labelText(el) {
    // <label for=id> and wrapping label; the control's own text (a select's options) is not part of it.
    const parts = [];
    try {
      if (el.labels) {
        for (const lab of el.labels) {
          let s = '';
          const walk = (n) => {
            for (const c of n.childNodes) {
              if (c.nodeType === 3) s += c.nodeValue;
              else if (c.nodeType === 1 && c !== el && !['SELECT', 'TEXTAREA', 'INPUT', 'BUTTON', 'SCRIPT', 'STYLE']
                       .includes(c.tagName)) walk(c);
            }
          };
          walk(lab);
          if (norm(s)) parts.push(norm(s));
        }
      }
    } catch (e) { /* ignore */ }
    if (!parts.length) {
      // Not in the accessibility spec, but common on simple pages: an unassociated <label> right before it.
      const prev = el.previousElementSibling;
      if (prev && prev.tagName === 'LABEL' && !prev.control) parts.push(norm(prev.textContent));
    }
    return norm(parts.join(' '));
  }

  function attrName(el) {
    const al = norm(el.getAttribute('aria-label'));
    if (al) return al;
    const lb = el.getAttribute('aria-labelledby');
    if (lb) { const s = textOfIds(lb); if (s) return s; }
    return '';
  }

  function isVisibleSelf(el, st) {
    if (st.visibility === 'hidden' || st.visibility === 'collapse') return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  }

  // The caret hidden, as Playwright's page.screenshot hides it for each shot (a <style> added and removed): a blinking
  // caret is drawn in some screenshots and not in others, which moves the pHash (observe.py's capture_png). An
  // adopted sheet is not a DOM node, so no MutationObserver (ours or the page's) sees it; adopted again by every
  // snapshot in case the page replaced document.adoptedStyleSheets. Specificity as Playwright's rule.
  function hideCaret() {
    try {
      if (!T.caretSheet) {
        T.caretSheet = new CSSStyleSheet();
        T.caretSheet.replaceSync('*:not(#tgpo-caret-aaaaaaaaaa.tgpo-caret-bbbbbbbbbbbbb) ' +
                                 '{ caret-color: transparent !important; }');
      }
      const sheets = document.adoptedStyleSheets;
      if (!sheets.includes(T.caretSheet)) document.adoptedStyleSheets = [...sheets, T.caretSheet];
    } catch (e) { /* no constructable style sheets: the caret may show */ }
  }

  T.snapshot = function (prefix, taken) {
    const root = document.documentElement;
    if (!root) return {prefix: prefix, nodes: [], url: location.href, title: document.title};
    hideCaret();
    let stored = root.getAttribute('data-tgpo-prefix');
    let next = parseInt(root.getAttribute('data-tgpo-next') || '1', 10) || 1;
    if (stored === null || (taken || []).includes(stored)) {
      if (stored !== null && stored !== prefix) {
        for (const el of document.querySelectorAll('[data-tgpo-id]')) el.removeAttribute('data-tgpo-id');
        next = 1;
      }
      stored = prefix;
      root.setAttribute('data-tgpo-prefix', stored);
    }
    const mk = (n) => (stored ? stored + '.' + n : String(n));
    const seen = new Set();
    const nodes = [];

    function assignId(el) {
      let id = el.getAttribute('data-tgpo-id');
      if (id !== null && !seen.has(id) && (stored ? id.startsWith(stored + '.') : /^\d+$/.test(id))) {
        seen.add(id);
        return id;
      }
      id = mk(next++);
      while (seen.has(id)) id = mk(next++);
      el.setAttribute('data-tgpo-id', id);
      seen.add(id);
      return id;
    }

    // walk(node, depth, parentSt, nameCtx) returns items: {t:'text', s} | {t:'node', node, kids} | {t:'br'}
    function walkChildren(parent, depth, st, nameCtx, out) {
      const kids = parent.shadowRoot ? [...parent.shadowRoot.childNodes, ...parent.childNodes] : parent.childNodes;
      for (const c of kids) walk(c, depth, st, nameCtx, out);
    }

    function walk(n, depth, parentSt, nameCtx, out) {
      if (n.nodeType === 3) {
        if (parentSt && parentSt.visibility !== 'visible') return;
        const s = n.nodeValue;
        if (s && s.trim()) out.push({t: 'text', s: s});
        else if (s && s.length) out.push({t: 'text', s: ' '});
        return;
      }
      if (n.nodeType !== 1) return;
      const el = n;
      if (SKIP_TAGS.has(el.tagName)) return;
      if (el.tagName === 'BR') { out.push({t: 'br'}); return; }
      if (el.tagName === 'OPTION' || el.tagName === 'OPTGROUP' || el.tagName === 'DATALIST') return;
      const st = getComputedStyle(el);
      if (st.display === 'none') return;
      if (el.tagName === 'INPUT' && (el.getAttribute('type') || '').toLowerCase() === 'hidden') return;
      if (el.getAttribute('aria-hidden') === 'true' && !el.contains(document.activeElement)) {
        // aria-hidden subtrees are out of the accessibility tree; still walk for visible interactive children?
        // No: treat as hidden, like a screen reader would.
        return;
      }
      const selfVisible = isVisibleSelf(el, st);
      const block = !st.display.startsWith('inline') && st.display !== 'contents';
      const clipsChildren = st.overflow !== 'visible' && st.overflow !== '' && (() => {
        const r = el.getBoundingClientRect(); return r.width === 0 || r.height === 0;
      })();
      if (clipsChildren) return;

      let role = implicitRole(el);
      if (role && !INTERACTIVE_ROLES.has(role) && !SHOWN_STRUCT.has(role)) role = null;
      let clickable = isClickable(el, st, parentSt);
      if (clickable && !role && (el.querySelector(CONTAINER_SEL) || (el.textContent || '').length > 300)) {
        clickable = false;  // a container with a listener (delegation, drag handles): not one target
      }
      if (!role && clickable) role = 'clickable';
      if (role === 'img' && !(norm(el.getAttribute('alt')) || norm(el.getAttribute('title')) || attrName(el))) role =
        clickable ? 'clickable' : null;
      const interactive = !!role && (INTERACTIVE_ROLES.has(role) || clickable);
      if (!selfVisible && st.visibility !== 'visible') {
        // visibility:hidden: the element is skipped but a child may set visibility:visible again
        walkChildren(el, depth, st, nameCtx, out);
        return;
      }
      if (!selfVisible && role && role !== 'clickable') {
        // zero-size control / link: not shown (its children might be, e.g. a 0x0 inline wrapper)
        walkChildren(el, depth, st, nameCtx, out);
        return;
      }
      // Labels whose control is visible: their text is the control's name; don't repeat it as text.
      if (el.tagName === 'LABEL' && el.control) {
        const sub = [];
        walkChildren(el, depth, st, true, sub);
        for (const it of sub) if (it.t === 'node') out.push(it);
        return;
      }
      if (!role || (nameCtx && !interactive) || (role === 'clickable' && !selfVisible)) {
        if (block) out.push({t: 'br'});
        if (role === 'img' && nameCtx) out.push({t: 'text', s: ' ' + norm(el.getAttribute('alt') || el.getAttribute('title')) + ' '});
        walkChildren(el, depth, st, nameCtx, out);
        if (block) out.push({t: 'br'});
        return;
      }

      const node = {role: role, depth: depth, interactive: interactive};
      if (interactive || role === 'img' || role === 'iframe') node.id = assignId(el);
      if (el.disabled || el.getAttribute('aria-disabled') === 'true') node.disabled = true;
      const current = el.getAttribute('aria-current');  // the page's own mark of where the user is (sort, page, tab)
      if (current && current !== 'false') node.current = true;
      const kids = [];
      let name = attrName(el);
      if (role === 'textbox' || role === 'searchbox' || role === 'combobox' || role === 'slider' ||
          role === 'spinbutton') {
        if (!name) name = labelText(el);
        if (el.tagName === 'SELECT') {
          const opts = [...el.options];
          node.options = opts.map((o) => norm(o.label || o.textContent));
          const sel = el.selectedIndex >= 0 ? opts[el.selectedIndex] : null;
          node.value = sel ? norm(sel.label || sel.textContent) : '';
        } else if ('value' in el && el.tagName !== 'DIV') {
          node.value = el.type === 'password' ? '*'.repeat((el.value || '').length) : (el.value || '');
        } else if (el.hasAttribute('aria-valuetext') || el.hasAttribute('aria-valuenow')) {
          node.value = norm(el.getAttribute('aria-valuetext') || el.getAttribute('aria-valuenow'));
        } else {
          node.value = norm(el.innerText || el.textContent);
        }
        if (!name) name = norm(el.getAttribute('placeholder'));
        if (!name) name = norm(el.getAttribute('title'));
        if (!name && el.getAttribute('aria-placeholder')) name = norm(el.getAttribute('aria-placeholder'));
        if (el.tagName !== 'SELECT' && el.tagName !== 'INPUT' && el.tagName !== 'TEXTAREA') {
          walkChildren(el, depth + 1, st, true, kids);
        }
      } else if (role === 'iframe') {
        if (!name) name = norm(el.getAttribute('title') || el.getAttribute('name'));
        node.src = el.src || '';
      } else if (role === 'img') {
        if (!name) name = norm(el.getAttribute('alt'));
        if (!name) name = norm(el.getAttribute('title'));
      } else {
        if ((role === 'checkbox' || role === 'radio' || role === 'switch' || role === 'menuitemcheckbox' ||
             role === 'menuitemradio') ) {
          if ('checked' in el && el.tagName === 'INPUT') node.checked = !!el.checked;
          else node.checked = el.getAttribute('aria-checked') === 'true';
        }
        if (!name && el.tagName !== 'A' && el.tagName !== 'BUTTON') name = labelText(el);
        const contentName = NAME_FROM_CONTENT.has(role);
        walkChildren(el, depth + 1, st, contentName ? true : nameCtx, kids);
        if (!name && contentName) {
          name = norm(kids.filter((k) => k.t === 'text').map((k) => k.s).join(''));
          if (!name) name = norm(kids.filter((k) => k.t === 'node').map((k) => k.node.name).join(' '));
        }
        if (!name && el.tagName === 'INPUT') name = norm(el.value || (el.type === 'submit' ? 'Submit' : ''));
        if (!name) name = norm(el.getAttribute('alt') || el.getAttribute('title') || el.getAttribute('placeholder'));
        if (!name && el.tagName === 'INPUT' && el.type === 'image') name = norm(el.getAttribute('src'));
        if (role === 'link') node.href = el.href || '';
        if (el.tagName === 'INPUT' && el.type === 'checkbox' && el.indeterminate) node.checked = false;
      }
      node.name = clip(name, MAX_NAME);
      const folded = NAME_FROM_CONTENT.has(role) || role === 'textbox' || role === 'combobox';
      out.push({t: 'node', node: node, kids: folded ? kids.filter((k) => k.t === 'node') : kids});
    }

    // Flatten items into the node list; consecutive text pieces form one text line.
    function flatten(items, depth) {
      let buf = '';
      const flush = () => {
        const s = norm(buf);
        if (s) nodes.push({role: 'text', depth: depth, name: clip(s, MAX_TEXT), interactive: false});
        buf = '';
      };
      for (const it of items) {
        if (it.t === 'text') buf += it.s;
        else if (it.t === 'br') flush();
        else {
          flush();
          it.node.depth = depth;
          nodes.push(it.node);
          flatten(it.kids, depth + 1);
        }
      }
      flush();
    }

    const items = [];
    if (document.body) walk(document.body, 0, null, false, items);
    flatten(items, 0);
    root.setAttribute('data-tgpo-next', String(next));
    return {prefix: stored, nodes: nodes, url: location.href, title: document.title};
  };
})();
