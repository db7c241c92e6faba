import json,re,sys,statistics
txt=open(sys.argv[1]).read()
parts=re.split(r'^(## .*)$',txt,flags=re.M)[1:]
rows=[]
for h,p in zip(parts[0::2],parts[1::2]):
    try: j=json.loads(p[:p.rindex('}')+1])
    except Exception as e: print(h, 'FAILED', p[:200]); continue
    w=j['window']
    tag='old' if 'tgt-old' in h else 'new'
    r=dict(tag=tag,nodes=j['nodes'],reg=j['registration_secs'],regcpu=j['registration_controller_cpu_cores'],regfail=j['registration_failures'],cpu=w['controller']['cpu_cores'],rss=w['controller']['rss_mib'],peak=w['controller']['peak_rss_mib'],sq50=w['squeue']['p50_ms'],sq99=w['squeue']['p99_ms'],sub50=w['submit']['p50_ms'],sub99=w['submit']['p99_ms'],l50=w['launch']['p50_ms'],l99=w['launch']['p99_ms'],hb50=w['heartbeat']['p50_ms'],hb99=w['heartbeat']['p99_ms'],hbfail=w['heartbeat_failures'],never=w['never_launched'],pass_ms=w['scheduler_pass_mean_ms'],passes=w['scheduler_passes'],swarm=w['swarm_cpu_cores'],mb=round(w['metrics_bytes']/1e6,1),mms=w['metrics_read_ms'],fails=sum(j['failures'].values()),sub=w['submitted'],ends=w['ends_reported'],hbs=w['heartbeats'])
    rows.append(r); print(r)
keys=set((r['tag'],r['nodes']) for r in rows)
for k in sorted(keys):
    rs=[r for r in rows if (r['tag'],r['nodes'])==k]
    print(k, {m:(statistics.median([r[m] for r in rs]),min(r[m] for r in rs),max(r[m] for r in rs)) for m in ['reg','regcpu','cpu','rss','peak','sq50','sq99','sub99','l50','l99','hb50','hb99','hbfail','pass_ms','swarm','fails']})
