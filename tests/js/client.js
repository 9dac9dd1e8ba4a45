// kafkajs against a kafkalite broker: one scenario per run, the outcome printed as one JSON line.
// Usage: node client.js <bootstrap> <scenario> <topic>; scenarios: produce-consume, configs, admin, transaction.
'use strict'
const { Kafka, logLevel, ConfigResourceTypes } = require('kafkajs')

const [bootstrap, scenario, topic] = process.argv.slice(2)
// KAFKALITE_JS_SSL: {"ca": file, "cert": file, "key": file} (PEM) to connect over TLS (cert/key: mutual TLS)
const sslFiles = process.env.KAFKALITE_JS_SSL ? JSON.parse(process.env.KAFKALITE_JS_SSL) : null
const fs = require('fs')
const ssl = sslFiles && {
  ca: [fs.readFileSync(sslFiles.ca, 'utf-8')],
  ...(sslFiles.cert ? { cert: fs.readFileSync(sslFiles.cert, 'utf-8'), key: fs.readFileSync(sslFiles.key, 'utf-8') } : {})
}
// KAFKALITE_JS_SASL: kafkajs's sasl option as JSON, e.g. {"mechanism":"scram-sha-256","username":..,"password":..}
const sasl = process.env.KAFKALITE_JS_SASL ? JSON.parse(process.env.KAFKALITE_JS_SASL) : undefined
const kafka = new Kafka({ clientId: 'kafkalite-js', brokers: [bootstrap], logLevel: logLevel.NOTHING, ...(ssl ? { ssl } : {}), sasl })
const started = Date.now()
const out = (result) => { process.stdout.write(JSON.stringify({ ms: Date.now() - started, ...result }) + '\n') }

async function produceConsume () {
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true })
  await admin.disconnect()
  const producer = kafka.producer({ idempotent: true })
  await producer.connect()
  const messages = Array.from({ length: 50 }, (_, i) => ({ key: `k${i}`, value: `v${i}` }))
  await producer.send({ topic, messages })
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: `g-${topic}`, sessionTimeout: 10000, rebalanceTimeout: 10000 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const values = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`only ${values.length} messages in 20 s`)), 20000)
    consumer.run({
      eachMessage: async ({ message }) => {
        values.push(message.value.toString())
        if (values.length === messages.length) { clearTimeout(timer); resolve() }
      }
    }).catch(reject)
  })
  await consumer.disconnect()
  out({ values })
}

async function configs () {
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: 1, configEntries: [{ name: 'retention.ms', value: '111111' }] }] })
  const describe = async () => {
    const r = await admin.describeConfigs({ includeSynonyms: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }] })
    const entries = {}
    for (const e of r.resources[0].configEntries) entries[e.configName] = { value: e.configValue, isDefault: e.isDefault }
    return entries
  }
  const before = await describe()
  // legacy AlterConfigs: the set sent replaces retention.ms, which returns to its default
  await admin.alterConfigs({ validateOnly: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: topic,
    configEntries: [{ name: 'segment.bytes', value: '1048576' }, { name: 'cleanup.policy', value: 'compact' }] }] })
  const after = await describe()
  let invalid = null
  try {
    await admin.alterConfigs({ validateOnly: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: topic,
      configEntries: [{ name: 'retention.ms', value: 'soon' }] }] })
  } catch (e) { invalid = { type: e.type || e.name, message: e.message } }
  let broker = null
  const nodeId = (await admin.describeCluster()).brokers[0].nodeId
  try {
    await admin.alterConfigs({ validateOnly: false, resources: [{ type: ConfigResourceTypes.BROKER, name: `${nodeId}`,
      configEntries: [{ name: 'log.retention.ms', value: '1000' }] }] })
  } catch (e) { broker = { type: e.type || e.name, message: e.message } }
  await admin.disconnect()
  out({ before, after, invalid, broker })
}

async function adminPath () {
  const admin = kafka.admin()
  await admin.connect()
  const created = await admin.createTopics({ topics: [{ topic, numPartitions: 2 }], waitForLeaders: true })
  const listed = (await admin.listTopics()).includes(topic)
  const cluster = await admin.describeCluster()
  const meta = await admin.fetchTopicMetadata({ topics: [topic] })
  const offsets = await admin.fetchTopicOffsets(topic)
  await admin.deleteTopics({ topics: [topic], timeout: 5000 })
  const gone = !(await admin.listTopics()).includes(topic)
  const groups = await admin.listGroups()
  await admin.disconnect()
  out({ created, listed, brokers: cluster.brokers.length, partitions: meta.topics[0].partitions.length,
    offsets: offsets.length, gone, groups: Array.isArray(groups.groups) })
}

async function transaction () {
  const producer = kafka.producer({ transactionalId: `tx-${topic}`, maxInFlightRequests: 1, idempotent: true })
  try {
    await producer.connect()
    const txn = await producer.transaction()
    await txn.send({ topic, messages: [{ value: 'x' }] })
    await txn.commit()
    out({ error: null })
  } catch (e) {
    const cause = e.cause || e.originalError
    out({ error: { type: e.type || e.name, message: e.message, retriable: e.retriable,
      cause: cause ? { type: cause.type || cause.name, message: cause.message } : null } })
  } finally {
    await producer.disconnect().catch(() => {})
  }
}

const scenarios = { 'produce-consume': produceConsume, configs, admin: adminPath, transaction }
scenarios[scenario]().then(() => process.exit(0), (e) => {
  out({ failed: { type: e.type || e.name, message: e.message, stack: e.stack } })
  process.exit(1)
})
