// sluice dashboard: refresh the figures of the page (the elements with
// data-live and an id) every data-refresh milliseconds while the tab is
// visible, without a full reload. Stops while the tab is hidden.
(function () {
  'use strict';
  var ms = parseInt(document.body.getAttribute('data-refresh') || '0', 10);
  if (!ms) { return; }
  var timer = null;
  var busy = false;
  var count = 0;
  function refresh() {
    if (document.hidden || busy) { return; }
    busy = true;
    fetch(location.href, { headers: { 'X-Sluice-Live': '1' }, credentials: 'same-origin' })
      .then(function (r) {
        if (!r.ok) { throw new Error('status ' + r.status); }
        return r.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, 'text/html');
        document.querySelectorAll('[data-live][id]').forEach(function (el) {
          var fresh = doc.getElementById(el.id);
          if (fresh) { el.replaceWith(document.importNode(fresh, true)); }
        });
        count++;
        document.body.setAttribute('data-refreshed', String(count));
      })
      .catch(function () { /* the next tick tries again */ })
      .finally(function () { busy = false; });
  }
  function stop() {
    if (timer !== null) { clearInterval(timer); timer = null; }
  }
  function start() {
    stop();
    if (!document.hidden) { timer = setInterval(refresh, ms); }
  }
  document.addEventListener('visibilitychange', function () {
    if (document.hidden) { stop(); } else { refresh(); start(); }
  });
  start();
}());
