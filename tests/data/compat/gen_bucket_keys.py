import json, numpy as np
from lshcurator import Curator, CuratorConfig
if __name__ == '__main__':
    d=json.load(open('decisions.json'))
    files=['input-0.jsonl','input-1.jsonl','input-2.jsonl']
    out=[]
    for s in d['settings']:
        cur=Curator(CuratorConfig(shingle_k=s['shingle_k'], shingle_step=s['shingle_step'], bands=s['bands'], rows_per_band=s['rows'],
            similarity_threshold=s['threshold'], compute_mode=s['compute_mode'], max_workers=1, max_representatives_per_bucket=s['max_representatives_per_bucket']))
        keys,_=cur.compute_bucket_keys(files_path=files, fields='text', key_layout='row_bands')
        hot, mask = Curator.select_deduper_bucket_keys(keys, filter_freq=s['filter_low_freq_bucket_keys'])
        out.append({k:v for k,v in s.items() if k!='results'} | {'keys':[[str(int(x)) for x in row] for row in keys], 'hot_row_mask':[bool(m) for m in mask], 'hot_keys':[str(int(x)) for x in hot]})
        print(keys.shape, int(mask.sum()), len(hot))
    json.dump({'about':'lshcurator 0.2.3 Curator.compute_bucket_keys (row_bands) and select_deduper_bucket_keys on input-*.jsonl, field text; keys as decimal strings','settings':out}, open('bucket_keys.json','w'))
