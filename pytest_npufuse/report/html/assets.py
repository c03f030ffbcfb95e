"""The report page's inline style sheet and script: sorting, the summary's filter and search, and zoom
and pan on the timelines. Plain strings, so the page stays one offline file.

The script reads these URL fragments, so a link (or a headless browser) can open the page in a given
state: ``#sort=<column>[-desc]``, ``#filter=<verdict or gate status>``, ``#search=<text>`` and
``#zoom=<case index>:<start us>-<end us>``; they combine with ``&``.
"""

STYLE = """
body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:16px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 8px}h2{font-size:15px;margin:24px 0 6px;font-family:monospace}
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f0f0f0;cursor:pointer;user-select:none;white-space:nowrap}td{white-space:nowrap}
td:first-child,th:first-child{text-align:left}td:first-child{white-space:normal;overflow-wrap:anywhere;max-width:460px}
h1,h2,.facts,.findings,.message,.reason pre,.overlap,dl.env dd{overflow-wrap:anywhere}
th.sorted-asc::after{content:" \\25B2"}th.sorted-desc::after{content:" \\25BC"}
.v-passed,.g-unchanged,.g-improved{color:#1a7f37}.v-failed,.v-error,.g-regressed{color:#c62828;font-weight:600}
.v-skipped,.v-xfailed,.g-new{color:#8a6d00}
.facts span{margin-right:14px}.note{color:#555}
.timeline{display:block;margin:8px 0;border:1px solid #ddd}
.lane-bg{fill:#fafafa;stroke:#eee}.lane-label{font:11px monospace;fill:#333}.run-title{font:bold 12px sans-serif;fill:#111}
.grid{stroke:#e4e4e4}.tick{font:10px sans-serif;fill:#666;text-anchor:middle}
.k,.sub{stroke:#fff;stroke-width:.3}.e-cube{fill:#4e79a7}.e-vector{fill:#59a14f}.e-aicpu{fill:#f28e2b}.e-comm{fill:#b07aa1}
.e-host{fill:#9c755f}.host{fill:#9c755f}.agg{opacity:.7}.agg.host{fill:#b9a08e}
.sk{fill:#fff4c2;stroke:#6b5300;stroke-width:1.2}.break{stroke:#e00000;stroke-width:2.5}
.arrow{fill:none;stroke-width:1.6}.event{stroke:#1f4e9c;stroke-dasharray:4 2;stroke-width:1;opacity:.8}.race{stroke:#e00000;stroke-width:2.2}
.hazard{stroke:#d1006f;stroke-width:2.2;stroke-dasharray:6 3}
.head-event{fill:#1f4e9c}.head-race{fill:#e00000}.head-hazard{fill:#d1006f}
.legend span{display:inline-block;margin-right:12px}.legend i{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle}
code{background:#f4f4f4;padding:0 3px}
.below{display:flex;gap:24px;flex-wrap:wrap;align-items:flex-start}.findings{flex:1 1 480px;min-width:360px}
.findings ul{margin:4px 0;padding-left:20px}h3{font-size:13px;margin:8px 0 4px}
.name{font:10px monospace;fill:#fff;pointer-events:none}.sub-name{font-size:9px}
.zoomable rect,.zoomable path,.zoomable line{vector-effect:non-scaling-stroke}
svg.timeline{cursor:grab;touch-action:none}svg.timeline.dragging{cursor:grabbing}
.zoom-bar{font-size:12px;color:#555;margin:6px 0 0}.zoom-bar button{margin-right:4px}
.message{background:#fff5f5;border-left:3px solid #c62828;padding:6px 8px;margin:6px 0;white-space:pre-wrap;
font:12px/1.4 monospace;max-height:320px;overflow:auto}
.toolbar{margin:8px 0}.toolbar button{margin-right:4px}.toolbar button.active{background:#333;color:#fff}
.reason{text-align:left}.reason pre{margin:0;white-space:pre-wrap}.toolbar input{margin-left:8px;padding:2px 6px;width:280px}.hidden{display:none}
dl.env{display:grid;grid-template-columns:max-content auto;gap:1px 12px;margin:6px 0}dl.env dt{color:#555}dl.env dd{margin:0;font-family:monospace}
.trend{display:block;margin:4px 0}.trend .line{fill:none;stroke:#4e79a7;stroke-width:1.5}.trend circle{fill:#4e79a7}
.trend .base{fill:none;stroke:#999;stroke-width:1;stroke-dasharray:3 2}.trend text{font:10px sans-serif;fill:#555}
"""

SCRIPT = r"""
(function(){
  var params={};
  location.hash.replace(/^#/,'').split('&').forEach(function(part){
    var at=part.indexOf('=');if(at>0){params[part.slice(0,at)]=decodeURIComponent(part.slice(at+1));}});

  function value(cell){var v=cell.getAttribute('data-v');var n=parseFloat(v);return isNaN(n)?v:n;}
  function sortBy(table,column,descending){
    var body=table.tBodies[0];var rows=Array.prototype.slice.call(body.rows);
    rows.sort(function(a,b){var x=value(a.cells[column]),y=value(b.cells[column]);
      var c=(typeof x==='number'&&typeof y==='number')?x-y:String(x).localeCompare(String(y));return descending?-c:c;});
    rows.forEach(function(r){body.appendChild(r);});
    Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,i){
      th.className=i===column?(descending?'sorted-desc':'sorted-asc'):'';});
  }
  document.querySelectorAll('table.sortable').forEach(function(table){
    Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,i){
      th.addEventListener('click',function(){sortBy(table,i,th.className==='sorted-asc');});});
  });
  var summary=document.getElementById('summary');
  var wanted=/^([a-z_]+)(-desc)?$/.exec(params.sort||'');
  if(wanted&&summary){var ths=summary.tHead.rows[0].cells;
    for(var i=0;i<ths.length;i++){if(ths[i].getAttribute('data-key')===wanted[1]){sortBy(summary,i,!!wanted[2]);}}}

  // The summary's filter (a verdict or gate status) and search (text in the case id): rows and their sections.
  var search=document.getElementById('search'),filter='';
  function applyFilter(){
    var text=(search?search.value:'').toLowerCase(),shown=0;
    document.querySelectorAll('[data-status]').forEach(function(el){
      var ok=(!filter||(' '+el.getAttribute('data-status')+' ').indexOf(' '+filter+' ')>=0)
        &&(!text||el.getAttribute('data-case').toLowerCase().indexOf(text)>=0);
      el.classList.toggle('hidden',!ok);if(ok&&el.parentNode.parentNode.id==='summary'){shown++;}});
    document.querySelectorAll('.toolbar button[data-filter]').forEach(function(b){
      b.classList.toggle('active',b.getAttribute('data-filter')===filter);});
    var count=document.getElementById('shown');if(count){count.textContent=shown;}
  }
  document.querySelectorAll('.toolbar button[data-filter]').forEach(function(b){
    b.addEventListener('click',function(){var f=b.getAttribute('data-filter');filter=filter===f?'':f;applyFilter();});});
  if(search){search.addEventListener('input',applyFilter);search.value=params.search||'';}
  filter=params.filter||'';applyFilter();

  // Zoom and pan: every g.zoomable of a timeline is scaled and shifted to show [t0, t1] microseconds.
  function Timeline(svg){
    var span=+svg.getAttribute('data-span-us'),left=+svg.getAttribute('data-left'),width=+svg.getAttribute('data-width');
    var t0=0,t1=span,groups=svg.querySelectorAll('g.zoomable'),names=svg.querySelectorAll('text.name');
    var axis=svg.querySelector('g.axis'),height=+svg.getAttribute('height');
    var bar=svg.nextElementSibling&&svg.nextElementSibling.classList.contains('zoom-bar')?svg.nextElementSibling:null;
    function nice(raw){var p=Math.pow(10,Math.floor(Math.log10(raw)));
      return [1,2,5,10].map(function(m){return m*p;}).filter(function(s){return s>=raw;})[0];}
    function label(us,step){return step>=1000?(+(us/1000).toPrecision(6))+' ms':(+us.toPrecision(6))+' us';}
    function drawAxis(){
      var step=nice((t1-t0)/10),html=[];
      for(var t=Math.ceil(t0/step)*step;t<=t1+step*1e-6;t+=step){
        var x=(left+width*(t-t0)/(t1-t0)).toFixed(1);
        html.push('<line x1="'+x+'" y1="20" x2="'+x+'" y2="'+height+'" class="grid"/><text x="'+x+'" y="16" class="tick">'+label(t,step)+'</text>');}
      axis.innerHTML=html.join('');
    }
    function layout(){
      var k=span/(t1-t0),shift=left-(left+width*t0/span)*k;
      groups.forEach(function(g){g.setAttribute('transform',k===1?'':'translate('+shift.toFixed(3)+',0) scale('+k.toPrecision(8)+',1)');});
      names.forEach(function(n){
        if(!n.hasAttribute('data-n')){n.setAttribute('data-n',n.textContent);}
        var full=n.getAttribute('data-n'),x0=+n.getAttribute('data-x0')*k+shift,x1=+n.getAttribute('data-x1')*k+shift;
        var a=Math.max(x0,left),b=Math.min(x1,left+width),chars=Math.floor((b-a-4)/(n.classList.contains('sub-name')?5.6:6.2));
        if(chars>=full.length){n.textContent=full;}else if(chars>=4){n.textContent=full.slice(0,chars-1)+'\u2026';}
        else{n.style.display='none';return;}
        n.style.display='';n.setAttribute('x',(a+2).toFixed(1));});
      if(axis){drawAxis();}
      svg.setAttribute('data-view',(+t0.toPrecision(9))+'-'+(+t1.toPrecision(9)));
      if(bar){bar.querySelector('.range').textContent=label(t0,1)+' \u2013 '+label(t1,1)+(k>1?' (zoom '+k.toFixed(1)+'x)':'');}
    }
    function show(a,b){var w=Math.max(b-a,span/1e5);a=Math.max(0,Math.min(a,span-w));t0=a;t1=Math.min(span,a+w);layout();}
    function at(event){var p=svg.createSVGPoint();p.x=event.clientX;p.y=event.clientY;
      var u=p.matrixTransform(svg.getScreenCTM().inverse());return t0+(u.x-left)/width*(t1-t0);}
    svg.addEventListener('wheel',function(e){e.preventDefault();var c=at(e),f=e.deltaY<0?0.8:1.25;
      show(c-(c-t0)*f,c+(t1-c)*f);},{passive:false});
    var drag=null;
    svg.addEventListener('pointerdown',function(e){drag={x:at(e),t0:t0,t1:t1};svg.classList.add('dragging');});
    window.addEventListener('pointerup',function(){drag=null;svg.classList.remove('dragging');});
    svg.addEventListener('pointermove',function(e){if(!drag){return;}
      var d=at(e)-drag.x;t0-=d;t1-=d;show(t0,t1);});
    svg.addEventListener('dblclick',function(){show(0,span);});
    if(bar){bar.querySelectorAll('button').forEach(function(b){b.addEventListener('click',function(){
      var act=b.getAttribute('data-zoom'),c=(t0+t1)/2,h=(t1-t0)/2;
      if(act==='in'){show(c-h/2,c+h/2);}else if(act==='out'){show(c-h*2,c+h*2);}else{show(0,span);}});});}
    layout();
    return {show:show};
  }
  var timelines={};
  document.querySelectorAll('section.case').forEach(function(section){
    var svg=section.querySelector('svg.timeline');if(svg){timelines[section.id.replace('case-','')]=Timeline(svg);}});
  var zoom=/^(\d+):([0-9.e+-]+)-([0-9.e+-]+)$/.exec(params.zoom||'');
  if(zoom&&timelines[zoom[1]]){timelines[zoom[1]].show(+zoom[2],+zoom[3]);
    var section=document.getElementById('case-'+zoom[1]);
    if(section.getBoundingClientRect().top>window.innerHeight){section.scrollIntoView();}}

  document.body.getBoundingClientRect();
  document.documentElement.setAttribute('data-rendered-ms',performance.now().toFixed(1));
})();
"""
